import os

from vakit_client import Client

TARGET = {"kind": "HTTP", "url": os.environ["REPORTS_URL"]}
CRONS = [
    dict(name="reports.settlement", schedule="0 2 * * *", time_zone="Europe/Istanbul",
         target=TARGET, payload={"report": "settlement"}, misfire_policy="RUN_ONCE"),
    dict(name="reports.usage", schedule="15 * * * *", time_zone="UTC", target=TARGET),
]

with Client(os.environ["VAKIT_URL"], os.environ["VAKIT_TOKEN"]) as vakit:
    # Creates what is new, updates what changed, deletes the "reports." crons
    # no longer listed here; run it from CI on every merge.
    for change in vakit.apply_crons(CRONS, owns="reports.", prune=True):
        print(change.action, change.name)
