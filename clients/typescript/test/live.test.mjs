// The generated client against a live API (tests/integration/test_typescript_client.py
// starts one and runs this with VAKIT_URL, VAKIT_TOKEN and TARGET_URL set).
import assert from "node:assert/strict";
import { test } from "node:test";

import { createVakitClient, newIdempotencyKey, ProblemError, unwrap } from "@vakit/client";

const vakit = createVakitClient({ baseUrl: process.env.VAKIT_URL, token: process.env.VAKIT_TOKEN });
const target = { kind: "HTTP", url: process.env.TARGET_URL };
const type = `ts.${Date.now()}`;
const runAt = new Date(Date.now() + 3600_000).toISOString();

test("create with a key, find, cancel", async () => {
  const key = newIdempotencyKey();
  const first = await vakit.POST("/api/v1/jobs", {
    params: { header: { "Idempotency-Key": key } },
    body: { type, runAt, target, payload: { from: "node" } },
  });
  assert.equal(first.response.status, 201);
  const jobId = unwrap(first).jobId;
  // The same key and body again: the first job, created once.
  const repeat = await vakit.POST("/api/v1/jobs", {
    params: { header: { "Idempotency-Key": key } },
    body: { type, runAt, target, payload: { from: "node" } },
  });
  assert.equal(repeat.response.status, 200);
  assert.equal(unwrap(repeat).jobId, jobId);

  const job = unwrap(await vakit.GET("/api/v1/jobs/{job_id}", { params: { path: { job_id: jobId } } }));
  assert.equal(job.status, "SCHEDULED");
  assert.deepEqual(job.payload, { from: "node" });

  const page = unwrap(await vakit.GET("/api/v1/jobs", { params: { query: { type, status: ["SCHEDULED"] } } }));
  assert.deepEqual(page.items.map((j) => j.jobId), [jobId]);

  const cancelled = unwrap(await vakit.DELETE("/api/v1/jobs/{job_id}", { params: { path: { job_id: jobId } } }));
  assert.equal(cancelled.status, "CANCELLED");
});

test("a refused call is a problem with its type", async () => {
  const refused = await vakit.POST("/api/v1/jobs", { body: { type, runAt: "tomorrow", target } });
  assert.equal(refused.response.status, 422);
  assert.equal(refused.error.type, "/problems/invalid-request");
  assert.throws(() => unwrap(refused), (err) => err instanceof ProblemError && err.type === "/problems/invalid-request");

  const stranger = createVakitClient({ baseUrl: process.env.VAKIT_URL, token: "not-a-token" });
  const denied = await stranger.GET("/api/v1/jobs", {});
  assert.equal(denied.response.status, 401);
  assert.equal(denied.error.type, "/problems/unauthorized");
});
