"""Moves the messages of the Scheduler DLQ back to the runs queue.

SQS's own DLQ redrive (console "Start DLQ redrive", StartMessageMoveTask)
returns messages only to the queues whose redrive policy names the DLQ; the
Scheduler DLQ is no queue's DLQ (EventBridge Scheduler writes to it
directly), so that redrive refuses it. This script does what it would:
receive, send the body to the runs queue, delete, until the DLQ is empty or
--max messages moved. A message is deleted only after its copy was sent, so
a failure midway duplicates at most one message, never loses one; the
runner's claim absorbs a duplicate.

The body of a Scheduler DLQ message is the schedule's input as Scheduler
filled it in, so the runner reads it as any delivery: an occurrence older
than CATCH_UP_SECONDS is recorded as skipped (missed), the honest outcome.

Each message goes where it belongs. The DLQ is shared with the daily
reconcile schedule (input {"type": "reconcile.all"}; {"op": "reconcile_all"}
from older stacks) and the missed-occurrence check's schedule (input
{"type": "overdue.check"}): those are no run messages, and the runs queue
would only record them as malformed. With --reconcile-queue each is sent to
the reconcile FIFO queue in the message group its schedule uses
("reconcile-all", "overdue-check"; template.yaml), as its schedule would
have sent it, with a fresh deduplication id; without, it is left in the
DLQ and counted as left. `sat redrive` (infra/sat) does the same for
every DLQ of the stack; this script needs only Python and boto3.

Usage (credentials and region from the usual AWS variables or profile):
  python3 infra/python/redrive_scheduler_dlq.py --from <scheduler DLQ URL> --to <runs queue URL>
      [--reconcile-queue <ReconcileQueue URL>] [--max N]
Needs boto3. Prints one JSON line: {"moved": n, "reconciled": n, "left": n}.
"""

import argparse
import json
import sys

import boto3


def is_run_message(body):
    """A runs-queue message: the schedule input of a task's schedule."""
    try:
        value = json.loads(body)
    except ValueError:
        return False
    return isinstance(value, dict) and "task_id" in value and "scheduled_time" in value


# The reconcile schedules' inputs: (body as the schedule sends it, its
# message group), by what a DLQ message may hold.
DAILY = ('{"type": "reconcile.all"}', "reconcile-all")
CHECK = ('{"type": "overdue.check"}', "overdue-check")


def reconcile_work(body):
    """The reconcile schedule input a body is, as (body, group), or None."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if value == {"type": "reconcile.all"} or (isinstance(value, dict) and value.get("op") == "reconcile_all"):
        return DAILY
    if value == {"type": "overdue.check"}:
        return CHECK
    return None


def redrive(sqs, source, target, limit, reconcile_queue=None):
    moved = reconciled = left = 0
    while moved + reconciled + left < limit:
        got = sqs.receive_message(
            QueueUrl=source,
            MaxNumberOfMessages=min(10, limit - moved - reconciled - left),
            WaitTimeSeconds=1,
            VisibilityTimeout=120,
        )
        messages = got.get("Messages", [])
        if not messages:
            break
        for message in messages:
            body = message["Body"]
            work = reconcile_work(body)
            if is_run_message(body):
                sqs.send_message(QueueUrl=target, MessageBody=body)
                moved += 1
            elif work and reconcile_queue:
                work_body, group = work
                sqs.send_message(
                    QueueUrl=reconcile_queue,
                    MessageBody=work_body,
                    MessageGroupId=group,
                    # A fresh id: the schedule's own send may still be
                    # within the queue's deduplication window.
                    MessageDeduplicationId="redrive-" + message["MessageId"],
                )
                reconciled += 1
            else:
                # Not a run: left for an operator (invisible for the rest
                # of this run, so it is counted once).
                left += 1
                continue
            sqs.delete_message(QueueUrl=source, ReceiptHandle=message["ReceiptHandle"])
    return {"moved": moved, "reconciled": reconciled, "left": left}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", required=True, help="the Scheduler DLQ's URL")
    parser.add_argument("--to", dest="target", required=True, help="the runs queue's URL")
    parser.add_argument(
        "--reconcile-queue",
        dest="reconcile_queue",
        help="the ReconcileQueue's URL: the reconcile schedules' missed inputs are sent to it",
    )
    parser.add_argument("--max", dest="limit", type=int, default=100_000, help="stop after this many")
    args = parser.parse_args(argv)
    if args.source == args.target:
        parser.error("--from and --to name the same queue")
    counts = redrive(boto3.client("sqs"), args.source, args.target, args.limit, args.reconcile_queue)
    print(json.dumps(counts))


if __name__ == "__main__":
    main(sys.argv[1:])
