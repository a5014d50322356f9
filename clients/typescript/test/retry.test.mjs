// Retries against a scripted local server (no API needed): the same
// Idempotency-Key on every attempt of a create, and a job action answered
// 503 not sent twice.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import { createVakitClient } from "@vakit/client";

const answers = [];
const seen = [];
let server;
let vakit;

before(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      seen.push({ method: req.method, url: req.url, key: req.headers["idempotency-key"] });
      const [status, body, headers = {}] = answers.shift();
      res.writeHead(status, { "Content-Type": "application/json", ...headers }).end(JSON.stringify(body));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}/api/v1`;
  vakit = createVakitClient({ baseUrl: url, token: "tok", retry: { backoffMs: 5, maxBackoffMs: 10 } });
});

after(() => server.close());

const unavailable = [503, { type: "/problems/shard-unavailable", status: 503, detail: "shard 1" }, { "Retry-After": "0" }];
const body = { type: "t", runAt: "2030-01-01T00:00:00Z", target: { kind: "NOOP" } };

test("a create refused with 503 is sent again with the same key", async () => {
  seen.length = 0;
  answers.push(unavailable, unavailable, [201, { jobId: "job_1", status: "SCHEDULED" }]);
  const created = await vakit.POST("/api/v1/jobs", { body });
  assert.equal(created.data.jobId, "job_1");
  assert.equal(seen.length, 3);
  assert.ok(seen[0].key && seen.every((s) => s.key === seen[0].key), JSON.stringify(seen));
  // Each create has its own key.
  answers.push([201, { jobId: "job_2", status: "SCHEDULED" }]);
  await vakit.POST("/api/v1/jobs", { body });
  assert.notEqual(seen[3].key, seen[0].key);
});

test("a trigger answered 503 is not sent twice; a 429 is", async () => {
  seen.length = 0;
  answers.push(unavailable);
  const refused = await vakit.POST("/api/v1/cron-jobs/{cron_job_id}/trigger", { params: { path: { cron_job_id: "cron_1" } } });
  assert.equal(refused.response.status, 503);
  assert.equal(refused.error.type, "/problems/shard-unavailable");
  assert.equal(seen.length, 1);
  answers.push([429, { type: "/problems/too-many-requests", status: 429, detail: "slow" }, { "Retry-After": "0" }],
               [201, { jobId: "job_9", scheduledFor: "2030-01-01T00:00:00Z" }]);
  const triggered = await vakit.POST("/api/v1/cron-jobs/{cron_job_id}/trigger", { params: { path: { cron_job_id: "cron_1" } } });
  assert.equal(triggered.data.jobId, "job_9");
  assert.equal(seen.length, 3);
});
