# The queues of the Terraform scenario (tests/clients-terraform/test_terraform.py); the provider
# block is README's snippet, tests/snippets/terraform_provider.tf.
terraform {
  required_providers {
    aws = { source = "hashicorp/aws" }
  }
}

variable "prefix" { type = string }
variable "visibility_timeout_seconds" { type = number }

# The provider waits at least 25 s after every change of a queue (six equal reads of its
# attributes, 5 s apart), so each step of a dependency chain costs that much: the queue policy is
# the queue's `policy` argument here rather than an aws_sqs_queue_policy resource, one step less
# on apply and on destroy.
resource "aws_sqs_queue" "dlq" {
  name = "${var.prefix}-dlq"
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "operators"
      Effect    = "Allow"
      Principal = { AWS = "arn:aws:iam::111122223333:root" }
      Action    = ["sqs:ReceiveMessage", "sqs:DeleteMessage"]
      Resource  = "arn:aws:sqs:us-east-1:000000000000:${var.prefix}-dlq"
    }]
  })
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = ["arn:aws:sqs:us-east-1:000000000000:${var.prefix}-jobs"]
  })
}

resource "aws_sqs_queue" "jobs" {
  name                       = "${var.prefix}-jobs"
  visibility_timeout_seconds = var.visibility_timeout_seconds
  message_retention_seconds  = 86400
  receive_wait_time_seconds  = 5
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq.arn
    maxReceiveCount     = 4
  })
  tags = {
    team = "payments"
    env  = "test"
  }
}

resource "aws_sqs_queue" "events" {
  name                        = "${var.prefix}-events.fifo"
  fifo_queue                  = true
  content_based_deduplication = true
  deduplication_scope         = "messageGroup"
  fifo_throughput_limit       = "perMessageGroupId"
}

output "jobs_url" { value = aws_sqs_queue.jobs.id }
output "events_url" { value = aws_sqs_queue.events.id }
output "dlq_arn" { value = aws_sqs_queue.dlq.arn }
