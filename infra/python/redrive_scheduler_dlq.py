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

Usage (credentials and region from the usual AWS variables or profile):
  python3 infra/python/redrive_scheduler_dlq.py --from <scheduler DLQ URL> --to <runs queue URL> [--max N]
Needs boto3. Prints one JSON line: {"moved": n}.
"""

import argparse
import json
import sys

import boto3


def redrive(sqs, source, target, limit):
    moved = 0
    while moved < limit:
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
            sqs.send_message(QueueUrl=target, MessageBody=message["Body"])
            sqs.delete_message(QueueUrl=source, ReceiptHandle=message["ReceiptHandle"])
            moved += 1
    return moved


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", required=True, help="the Scheduler DLQ's URL")
    parser.add_argument("--to", dest="target", required=True, help="the runs queue's URL")
    parser.add_argument("--max", dest="limit", type=int, default=100_000, help="stop after this many")
    args = parser.parse_args(argv)
    if args.source == args.target:
        parser.error("--from and --to name the same queue")
    moved = redrive(boto3.client("sqs"), args.source, args.target, args.limit)
    print(json.dumps({"moved": moved}))


if __name__ == "__main__":
    main(sys.argv[1:])
