// Shared helpers of the JavaScript client tests: the endpoint from LEASEQ_ENDPOINT (set by
// scripts/test-clients.sh), unique queue names, and the MD5s SQS computes.
import { createHash, randomBytes } from "node:crypto";

export function endpoint() {
  const value = process.env.LEASEQ_ENDPOINT;
  if (!value) {
    throw new Error("LEASEQ_ENDPOINT is not set (run scripts/test-clients.sh)");
  }
  return value.replace(/\/$/, "");
}

/** A queue name no other test (or run) uses: `js-<tag>-<random>`. */
export function queueName(tag) {
  const prefix = process.env.LEASEQ_QUEUE_PREFIX ?? "js";
  return `${prefix}-${tag}-${randomBytes(4).toString("hex")}`.slice(0, 80);
}

export function md5Hex(data) {
  return createHash("md5").update(data).digest("hex");
}

/**
 * MD5OfMessageAttributes as SQS defines it: the attributes sorted by name, each encoded as
 * length-prefixed name, length-prefixed data type, a transport byte (1 string, 2 binary) and the
 * length-prefixed value, lengths 4-byte big-endian (the algorithm of the Java v2 SDK's
 * MessageMD5ChecksumInterceptor; see crates/sqs/tests/attribute_md5.rs for the citations).
 */
export function md5OfAttributes(attributes) {
  const prefixed = (bytes) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    return Buffer.concat([length, bytes]);
  };
  const hash = createHash("md5");
  for (const name of Object.keys(attributes).sort()) {
    const value = attributes[name];
    hash.update(prefixed(Buffer.from(name, "utf8")));
    hash.update(prefixed(Buffer.from(value.DataType, "utf8")));
    if (value.StringValue !== undefined) {
      hash.update(Buffer.from([1]));
      hash.update(prefixed(Buffer.from(value.StringValue, "utf8")));
    } else {
      hash.update(Buffer.from([2]));
      hash.update(prefixed(Buffer.from(value.BinaryValue)));
    }
  }
  return hash.digest("hex");
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
