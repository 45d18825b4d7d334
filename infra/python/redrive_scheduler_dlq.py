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
reconcile schedule, whose input is {"op": "reconcile_all"}: that is no run
message, and the runs queue would only record it as malformed. With
--reconcile-function it is given to that function (an asynchronous invoke,
the pass it missed); without, it is left in the DLQ and counted as left.

Usage (credentials and region from the usual AWS variables or profile):
  python3 infra/python/redrive_scheduler_dlq.py --from <scheduler DLQ URL> --to <runs queue URL>
      [--reconcile-function <ReconcileFunction name>] [--max N]
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


def is_reconcile_pass(body):
    try:
        value = json.loads(body)
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("op") == "reconcile_all"


def redrive(sqs, source, target, limit, lam=None, reconcile_function=None):
    moved = reconciled = left = 0
    while moved + reconciled + left < limit:
        got = sqs.receive_message(
            QueueUrl=source,
            MaxNumberOfMessages=min(10, limit - moved),
            WaitTimeSeconds=1,
            VisibilityTimeout=120,
        )
        messages = got.get("Messages", [])
        if not messages:
            break
        for message in messages:
            body = message["Body"]
            if is_run_message(body):
                sqs.send_message(QueueUrl=target, MessageBody=body)
                moved += 1
            elif is_reconcile_pass(body) and reconcile_function:
                lam.invoke(FunctionName=reconcile_function, InvocationType="Event", Payload=body.encode())
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
        "--reconcile-function",
        dest="reconcile_function",
        help="the ReconcileFunction's name: the daily pass's missed input is given to it",
    )
    parser.add_argument("--max", dest="limit", type=int, default=100_000, help="stop after this many")
    args = parser.parse_args(argv)
    if args.source == args.target:
        parser.error("--from and --to name the same queue")
    lam = boto3.client("lambda") if args.reconcile_function else None
    counts = redrive(boto3.client("sqs"), args.source, args.target, args.limit, lam, args.reconcile_function)
    print(json.dumps(counts))


if __name__ == "__main__":
    main(sys.argv[1:])
