/**
 * For the services that receive firings: check that one was signed by Vakit
 * with the owner's secret (Standard Webhooks' scheme), and read it. The same
 * check as the Python client's verify_firing: `webhook-signature` holds
 * space-separated `v1,<base64>` entries, each the HMAC-SHA256 of
 * `<webhook-id>.<webhook-timestamp>.<body>` under one of the owner's secrets
 * (`whsec_` + base64, or plain text; two during a rotation).
 */

/** Seconds a firing's timestamp may be from the receiver's clock. */
export const DEFAULT_TOLERANCE = 300;

export interface Firing {
  jobId: string;
  type: string;
  scheduledFor: string;
  attempt: number;
  payload: unknown;
  /** What to deduplicate on: store it with the firing's effect. */
  idempotencyKey: string;
}

export class InvalidSignature extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InvalidSignature";
  }
}

type HeaderSource = Headers | Record<string, string | string[] | undefined>;

function header(headers: HeaderSource, name: string): string {
  const value =
    headers instanceof Headers
      ? headers.get(name)
      : Object.entries(headers).find(([key]) => key.toLowerCase() === name)?.[1];
  const text = Array.isArray(value) ? value[0] : value;
  if (!text) throw new InvalidSignature(`the firing has no ${name} header`);
  return text;
}

function keyBytes(secret: string): Uint8Array<ArrayBuffer> {
  return secret.startsWith("whsec_")
    ? Uint8Array.from(atob(secret.slice("whsec_".length)), (c) => c.charCodeAt(0))
    : new TextEncoder().encode(secret);
}

/**
 * The firing in `body` (the raw bytes as received) if its signature verifies
 * with `secret` (or any of several) and its timestamp is within `tolerance`
 * seconds of now; throws InvalidSignature otherwise.
 */
export async function verifyFiring(
  body: Uint8Array,
  headers: HeaderSource,
  secret: string | string[],
  { tolerance = DEFAULT_TOLERANCE, now = Date.now() / 1000 } = {},
): Promise<Firing> {
  const id = header(headers, "webhook-id");
  const stamp = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  const sent = Number(stamp);
  if (!Number.isInteger(sent)) throw new InvalidSignature(`webhook-timestamp ${stamp} is not Unix seconds`);
  if (Math.abs(now - sent) > tolerance) {
    throw new InvalidSignature(`webhook-timestamp is ${Math.round(now - sent)} s from now`);
  }
  const prefix = new TextEncoder().encode(`${id}.${stamp}.`);
  const signed = new Uint8Array(prefix.length + body.length);
  signed.set(prefix);
  signed.set(body, prefix.length);
  const given = signatures
    .split(" ")
    .filter((entry) => entry.startsWith("v1,"))
    .map((entry) => Uint8Array.from(atob(entry.slice(3)), (c) => c.charCodeAt(0)));
  for (const s of Array.isArray(secret) ? secret : [secret]) {
    const key = await crypto.subtle.importKey("raw", keyBytes(s), { name: "HMAC", hash: "SHA-256" }, false, [
      "verify",
    ]);
    for (const signature of given) {
      // subtle.verify compares in constant time.
      if (await crypto.subtle.verify("HMAC", key, signature, signed)) {
        const doc = JSON.parse(new TextDecoder().decode(body)) as Omit<Firing, "idempotencyKey">;
        return { ...doc, idempotencyKey: id };
      }
    }
  }
  throw new InvalidSignature("no webhook-signature entry verifies with the secret given");
}
