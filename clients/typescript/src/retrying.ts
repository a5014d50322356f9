/**
 * Retries, as the Python client makes them: a request is sent again when the
 * API says it did nothing and will take it later (429, or 503 with
 * Retry-After), or when no answer came, and sending it twice does no harm: it
 * reads or is idempotent by its method, or it carries an Idempotency-Key. The
 * request sent again is the same one, so its key is the same: the server
 * answers a repeat create with the first job.
 */

export interface RetryOptions {
  /** Sends after the first (default 4). */
  maxRetries?: number;
  /** The first wait without Retry-After, doubling (default 500 ms) … */
  backoffMs?: number;
  /** … up to this (default 8 s). */
  maxBackoffMs?: number;
  /** A longer Retry-After is the caller's to decide: answered, not waited (default 60 s). */
  maxRetryAfterMs?: number;
}

type Fetch = (input: Request) => Promise<Response>;

const REPEATABLE = new Set(["GET", "HEAD", "OPTIONS", "PUT", "PATCH", "DELETE"]);

function retryAfterMs(value: string | null): number | undefined {
  if (!value) return undefined;
  const seconds = Number(value);
  if (!Number.isNaN(seconds)) return Math.max(0, seconds * 1000);
  const when = Date.parse(value);
  return Number.isNaN(when) ? undefined : Math.max(0, when - Date.now());
}

/** A fetch for openapi-fetch (createClient's `fetch`) that retries as described above. */
export function retryingFetch(inner: Fetch = (r) => globalThis.fetch(r), options: RetryOptions = {}): Fetch {
  const { maxRetries = 4, backoffMs = 500, maxBackoffMs = 8000, maxRetryAfterMs = 60_000 } = options;
  const backoff = (retry: number) => Math.min(maxBackoffMs, backoffMs * 2 ** retry) * (0.5 + Math.random() / 2);
  return async (request) => {
    const safe = REPEATABLE.has(request.method) || request.headers.has("Idempotency-Key");
    for (let retry = 0; ; retry++) {
      let wait: number | undefined;
      try {
        const response = await inner(request.clone());
        // A 429 is the limiter's, before any work; a 503 may follow a write
        // that committed, so only a request safe to send twice goes again.
        if (retry >= maxRetries || !(response.status === 429 || (response.status === 503 && safe))) {
          return response;
        }
        const after = retryAfterMs(response.headers.get("Retry-After"));
        if (after !== undefined && after > maxRetryAfterMs) return response;
        wait = after ?? backoff(retry);
      } catch (err) {
        if (retry >= maxRetries || !safe) throw err;
        wait = backoff(retry);
      }
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  };
}
