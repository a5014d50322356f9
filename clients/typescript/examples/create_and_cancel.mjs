import { createVakitClient, ProblemError, unwrap } from "@vakit/client";

const vakit = createVakitClient({ baseUrl: process.env.VAKIT_URL, token: process.env.VAKIT_TOKEN });
// The same order, the same key: a repeat returns this job (else newIdempotencyKey()).
const { jobId } = unwrap(await vakit.POST("/api/v1/jobs", {
  params: { header: { "Idempotency-Key": "order-98213-cancel-unpaid" } },
  body: { type: "order.cancel-unpaid", runAt: "2030-01-01T14:30:00Z",
          target: { kind: "HTTP", url: process.env.ORDERS_URL }, payload: { orderId: 98213 } },
}));
try {
  unwrap(await vakit.DELETE("/api/v1/jobs/{job_id}", { params: { path: { job_id: jobId } } }));
} catch (err) {
  if (!(err instanceof ProblemError && err.type === "/problems/conflict")) throw err;
  console.log("not cancelled:", err.detail); // it has started (or was cancelled before)
}
const job = unwrap(await vakit.GET("/api/v1/jobs/{job_id}", { params: { path: { job_id: jobId } } }));
console.log(jobId, job.status);
