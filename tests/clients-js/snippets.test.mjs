// README's JavaScript snippets (tests/snippets/*.mjs) run as they are, with README's endpoint
// 127.0.0.1:9324 replaced by the test server's. Node reads each from stdin with this directory as
// its working directory, so the imports resolve to the pinned packages here.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { endpoint } from "./common.mjs";

const here = dirname(fileURLToPath(import.meta.url));

function runSnippet(file) {
  const source = readFileSync(join(here, "..", "snippets", file), "utf8")
    .replaceAll("127.0.0.1:9324", new URL(endpoint()).host);
  return execFileSync(process.execPath, ["--input-type=module"], {
    cwd: here, input: source, encoding: "utf8", timeout: 30_000,
  });
}

test("README's SDK v3 snippet runs", () => {
  assert.equal(runSnippet("js-sdk.mjs"), "hello\n");
});

test("README's sqs-producer/sqs-consumer snippet runs", () => {
  assert.equal(runSnippet("sqs-consumer.mjs"), "hello\n");
});
