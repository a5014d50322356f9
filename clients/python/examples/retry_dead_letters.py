import os

from vakit_client import Client

with Client(os.environ["VAKIT_URL"], os.environ["VAKIT_TOKEN"]) as vakit:
    # Every page of the search, fetched as the loop goes.
    for job in vakit.search_jobs(status="FAILED", type="order.cancel-unpaid"):
        print("retrying", job.id, job.last_error)
        vakit.retry_job(job.id)  # same jobId and scheduledFor: still deduplicated
