"""The Query-protocol client of scripts/callgrind-send.sh (WORKLOAD=query-send, query-consume):
one keep-alive connection, one request at a time, from the standard library alone.

  query_load.py PORT create QUEUE        CreateQueue
  query_load.py PORT send QUEUE N        N SendMessage of a 256 B body
  query_load.py PORT consume QUEUE N     ReceiveMessage of 10 + DeleteMessageBatch of what it
                                         got, until N messages are consumed

The form bodies are what botocore's Query serializer writes: `Action`, `Version`, the members by
their Query names, percent-encoded (`QueueUrl=http%3A%2F%2F...`). Exits non-zero on any answer
other than 200, or on a batch entry that failed.
"""
import http.client
import re
import sys
import urllib.parse

AUTHORIZATION = ("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/us-east-1/sqs/aws4_request, "
                 "SignedHeaders=host, Signature=0")


def main():
    port, command, queue = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    connection = http.client.HTTPConnection("127.0.0.1", port)

    def post(action, params):
        body = urllib.parse.urlencode({"Action": action, "Version": "2012-11-05", **params})
        connection.request("POST", "/", body, {
            "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
            "Authorization": AUTHORIZATION,
        })
        response = connection.getresponse()
        text = response.read().decode()
        if response.status != 200:
            sys.exit(f"{action}: HTTP {response.status}: {text}")
        return text

    url = f"http://127.0.0.1:{port}/000000000000/{queue}"
    if command == "create":
        post("CreateQueue", {"QueueName": queue})
    elif command == "send":
        for i in range(count):
            post("SendMessage", {"QueueUrl": url, "MessageBody": f"{i:08d}" + "x" * 248})
    elif command == "consume":
        consumed = 0
        while consumed < count:
            answer = post("ReceiveMessage", {
                "QueueUrl": url, "MaxNumberOfMessages": "10", "WaitTimeSeconds": "1"})
            handles = re.findall(r"<ReceiptHandle>([^<]*)</ReceiptHandle>", answer)
            if not handles:
                sys.exit(f"the queue ran dry after {consumed} messages")
            entries = {}
            for i, handle in enumerate(handles, 1):
                entries[f"DeleteMessageBatchRequestEntry.{i}.Id"] = str(i)
                entries[f"DeleteMessageBatchRequestEntry.{i}.ReceiptHandle"] = handle
            answer = post("DeleteMessageBatch", {"QueueUrl": url, **entries})
            if "BatchResultErrorEntry" in answer:
                sys.exit(f"a delete failed: {answer}")
            consumed += len(handles)
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
