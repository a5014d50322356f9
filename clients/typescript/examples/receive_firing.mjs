import { createServer } from "node:http";

import { InvalidSignature, verifyFiring } from "@vakit/client";

const secret = process.env.VAKIT_SIGNING_SECRET; // this owner's secret, whsec_…

createServer(async (req, res) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  try {
    const firing = await verifyFiring(Buffer.concat(chunks), req.headers, secret);
    // At least once: do the work once per firing.idempotencyKey, stored with its effect.
    console.log(firing.jobId, firing.attempt, JSON.stringify(firing.payload));
    res.writeHead(200).end();
  } catch (err) {
    if (!(err instanceof InvalidSignature)) throw err;
    res.writeHead(401).end();
  }
}).listen(Number(process.env.PORT ?? 8000), "127.0.0.1");
