// docker/codex-stub/model-stub.js: a scripted stand-in for the OpenAI
// Responses API, for the Codex end-to-end check of .ci/docker.sh. It replaces
// only the remote model service (unreachable from CI); Codex itself, its tool
// execution and the sandbox-runtime daemon are the real ones.
//
//   node model-stub.js PROOF_PATH PROOF_TEXT
//
// It listens on 127.0.0.1 on a free port and prints one line to stdout,
// `listening <port>`; Codex is pointed at it as a custom model provider:
//
//   codex exec -c model_provider=stub \
//     -c 'model_providers.stub={name="stub",base_url="http://127.0.0.1:PORT/v1",wire_api="responses"}' ...
//
// Script, per POST /v1/responses (streamed as server-sent events):
//   1. a request whose input has no function_call_output yet: one shell tool
//      call that writes PROOF_TEXT and a newline to PROOF_PATH, using whichever
//      shell tool the request offers (shell_command, exec_command, shell);
//   2. a request that carries the tool call's output: a final assistant
//      message, FINAL_TEXT below, followed by the output it saw;
//   *  a request whose input contains STUB-HANG is never answered (a model
//      that is thinking: for the docker stop check of a running Codex).
// Every request is logged to stderr as one JSON line (method, path, what was
// answered, and the sandbox_mode and approval_policy Codex announced to the
// model), so a failing run shows what Codex asked for. Anything else is
// answered 404 with a JSON error. The process runs until it is killed.
//
// No dependencies: Node's http module only (Node.js 18 of Debian bookworm).
"use strict";

const http = require("node:http");

const [proofPath, proofText] = process.argv.slice(2);
if (!proofPath || !proofText) {
  process.stderr.write("usage: node model-stub.js PROOF_PATH PROOF_TEXT\n");
  process.exit(2);
}
const FINAL_TEXT = "stub model: proof written";
const CALL_ID = "call_stub_1";

function log(obj) {
  process.stderr.write(JSON.stringify(obj) + "\n");
}

// shq quotes a string for a POSIX shell.
function shq(s) {
  return "'" + s.replace(/'/g, "'\\''") + "'";
}

// toolCall builds the function_call item for the first shell tool the request
// offers, or null when it offers none.
function toolCall(tools) {
  const script = "printf '%s\\n' " + shq(proofText) + " > " + shq(proofPath);
  const names = new Set((tools || []).map((t) => t.name || (t.type === "local_shell" ? "local_shell" : "")));
  let name, args;
  if (names.has("shell_command")) {
    name = "shell_command";
    args = { command: script };
  } else if (names.has("exec_command")) {
    name = "exec_command";
    args = { cmd: script };
  } else if (names.has("shell")) {
    name = "shell";
    args = { command: ["sh", "-c", script] };
  } else if (names.has("local_shell")) {
    return {
      type: "local_shell_call",
      id: "lsh_stub_1",
      call_id: CALL_ID,
      status: "completed",
      action: { type: "exec", command: ["sh", "-c", script] },
    };
  } else {
    return null;
  }
  return {
    type: "function_call",
    id: "fc_stub_1",
    call_id: CALL_ID,
    name,
    arguments: JSON.stringify(args),
  };
}

// toolOutput returns the output Codex sent back for our call, or undefined.
function toolOutput(input) {
  for (const item of input || []) {
    if ((item.type === "function_call_output" || item.type === "local_shell_call_output") && item.call_id === CALL_ID) {
      const o = item.output;
      return typeof o === "string" ? o : JSON.stringify(o);
    }
  }
  return undefined;
}

// policies returns what Codex told the model about its sandbox and approval
// policy (its "permissions instructions" text), so the check can see which
// configuration the CLI actually runs with.
function policies(body) {
  const text = JSON.stringify(body.input || []);
  const sandbox = /`sandbox_mode` is `([^`]+)`/.exec(text);
  const approval = /Approval policy is currently ([A-Za-z-]+)/.exec(text);
  return { sandbox_mode: sandbox ? sandbox[1] : null, approval_policy: approval ? approval[1] : null };
}

let seq = 0;

function sse(res, type, payload) {
  res.write("event: " + type + "\ndata: " + JSON.stringify({ type, sequence_number: seq++, ...payload }) + "\n\n");
}

function answer(res, responseId, items) {
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  const response = { id: responseId, object: "response", status: "in_progress", output: [] };
  sse(res, "response.created", { response });
  items.forEach((item, i) => {
    sse(res, "response.output_item.added", { output_index: i, item });
    if (item.type === "message") {
      sse(res, "response.output_text.delta", { output_index: i, item_id: item.id, content_index: 0, delta: item.content[0].text });
    }
    sse(res, "response.output_item.done", { output_index: i, item });
  });
  sse(res, "response.completed", {
    response: {
      ...response,
      status: "completed",
      output: items,
      usage: { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 15 },
    },
  });
  res.end();
}

let turn = 0;

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const path = req.url.split("?")[0];
    if (req.method !== "POST" || !path.endsWith("/responses")) {
      log({ method: req.method, path, answered: 404 });
      res.writeHead(404, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ error: { message: "not served by the stub", type: "not_found" } }));
      return;
    }
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch (e) {
      log({ method: req.method, path, answered: 400, error: String(e) });
      res.writeHead(400, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ error: { message: "body is not JSON", type: "invalid_request_error" } }));
      return;
    }
    turn++;
    if (JSON.stringify(body.input || []).includes("STUB-HANG")) {
      // A model that never answers: Codex waits, for a shutdown test.
      log({ method: req.method, path, turn, answered: "hang" });
      return;
    }
    const out = toolOutput(body.input);
    const tools = (body.tools || []).map((t) => t.name || t.type);
    if (out === undefined) {
      const call = toolCall(body.tools);
      if (!call) {
        log({ method: req.method, path, turn, answered: 400, tools });
        res.writeHead(400, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ error: { message: "no shell tool offered: " + tools.join(","), type: "invalid_request_error" } }));
        return;
      }
      log({ method: req.method, path, turn, model: body.model, ...policies(body), tools, answered: "tool call " + (call.name || call.type) });
      answer(res, "resp_stub_" + turn, [call]);
      return;
    }
    log({ method: req.method, path, turn, answered: "final message", tool_output: out });
    const text = FINAL_TEXT + "\n" + out;
    answer(res, "resp_stub_" + turn, [
      { type: "message", id: "msg_stub_" + turn, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] },
    ]);
  });
});

server.listen(0, "127.0.0.1", () => {
  process.stdout.write("listening " + server.address().port + "\n");
});
