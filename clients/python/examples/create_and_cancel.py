import os
from datetime import UTC, datetime, timedelta

from vakit_client import Client, Conflict

order = {"id": 98213, "placed_at": datetime(2030, 1, 1, 14, 0, tzinfo=UTC)}  # yours

with Client(os.environ["VAKIT_URL"], os.environ["VAKIT_TOKEN"]) as vakit:
    job = vakit.create_job(
        type="order.cancel-unpaid",
        run_at=order["placed_at"] + timedelta(minutes=30),
        target={"kind": "HTTP", "url": os.environ["ORDERS_URL"]},
        payload={"orderId": order["id"]},
        # The same order, the same key: a repeat of this call returns this job.
        idempotency_key=f"order-{order['id']}-cancel-unpaid",
    )
    try:
        vakit.cancel_job(job.id)  # the order was paid in time
    except Conflict as exc:  # it has started (or was cancelled before)
        print("not cancelled:", exc.detail)
    print(job.id, vakit.get_job(job.id).status)
