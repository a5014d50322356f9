/**
 * Vakit's TypeScript client: the types are generated from the API's
 * /openapi.json by openapi-typescript (src/schema.d.ts, `make ts-client`),
 * the calls are openapi-fetch's, checked against those types. Nothing here
 * restates a model by hand.
 *
 *   const vakit = createVakitClient({ baseUrl: "http://127.0.0.1:8080", token });
 *   const { data, error } = await vakit.POST("/api/v1/jobs", {
 *     params: { header: { "Idempotency-Key": newIdempotencyKey() } },
 *     body: { type: "report", runAt: "2030-01-01T00:00:00Z", target: { kind: "HTTP", url } },
 *   });
 */
import createClient, { type Client, type ClientOptions } from "openapi-fetch";

import { type RetryOptions, retryingFetch } from "./retrying.js";
import type { components, operations, paths } from "./schema.js";

export type { components, operations, paths };
export type Schemas = components["schemas"];
export type Job = Schemas["JobOut"];
export type CronJob = Schemas["CronOut"];
export type VakitClient = Client<paths>;

export interface VakitOptions extends Omit<ClientOptions, "baseUrl"> {
  /** The API's address, without /api/v1 (a trailing /api/v1 is taken off). */
  baseUrl: string;
  /** A tenant token: sent as `Authorization: Bearer <token>`. */
  token: string;
  /** How calls are retried (retrying.ts); false: never. */
  retry?: RetryOptions | false;
}

const CREATE = /\/api\/v1\/jobs$/;

/**
 * An openapi-fetch client for the API. A create without an Idempotency-Key
 * gets a new one, which its retries then carry.
 */
export function createVakitClient({ baseUrl, token, headers, retry, fetch, ...rest }: VakitOptions): VakitClient {
  const inner = fetch ?? ((request: Request) => globalThis.fetch(request));
  const client = createClient<paths>({
    ...rest,
    fetch: retry === false ? inner : retryingFetch(inner, retry),
    baseUrl: baseUrl.replace(/\/+$/, "").replace(/\/api\/v1$/, ""),
    headers: { ...(headers as Record<string, string> | undefined), Authorization: `Bearer ${token}` },
  });
  client.use({
    onRequest({ request }) {
      if (request.method === "POST" && CREATE.test(new URL(request.url).pathname) && !request.headers.has("Idempotency-Key")) {
        request.headers.set("Idempotency-Key", newIdempotencyKey());
      }
      return request;
    },
  });
  return client;
}

/** A new Idempotency-Key for one create: send the same one on its retries. */
export function newIdempotencyKey(): string {
  return crypto.randomUUID();
}

/** A problem+json answer (RFC 9457) as an exception: `type` is the problem type. */
export class ProblemError extends Error {
  readonly type: string;
  readonly status: number;
  readonly detail: string;
  readonly body: Record<string, unknown>;

  constructor(status: number, body: unknown) {
    const doc = (typeof body === "object" && body !== null ? body : {}) as Record<string, unknown>;
    const type = typeof doc.type === "string" ? doc.type : "about:blank";
    const detail = typeof doc.detail === "string" ? doc.detail : `HTTP ${status}`;
    super(`${status} ${type}: ${detail}`);
    this.name = "ProblemError";
    this.type = type;
    this.status = status;
    this.detail = detail;
    this.body = doc;
  }
}

/** The data of an openapi-fetch result, or its problem thrown as a ProblemError. */
export function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.error !== undefined || !result.response.ok) {
    throw new ProblemError(result.response.status, result.error);
  }
  return result.data as T;
}

export { DEFAULT_TOLERANCE, type Firing, InvalidSignature, verifyFiring } from "./firings.js";
export { type RetryOptions, retryingFetch } from "./retrying.js";
