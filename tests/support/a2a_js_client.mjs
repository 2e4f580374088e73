// The official JavaScript A2A SDK (@a2a-js/sdk 0.3.x, the version Gemini CLI pins) against
// agentry's A2A server, in the 0.3 dialect.
//
// Usage: node a2a_js_client.mjs ECHO_CARD_URL ASKER_CARD_URL   (NODE_PATH: the SDK's node_modules)
//
// The agents are the ones of a2a_python_client.py. Each check prints "ok <name>"; the first
// failure throws and exits non-zero.
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";

const require = createRequire(process.env.NODE_PATH.split(":")[0] + "/");
const { A2AClient } = require("@a2a-js/sdk/client");

function expect(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

function message(text, extra = {}) {
  return {
    message: { kind: "message", messageId: randomUUID(), role: "user", parts: [{ kind: "text", text }], ...extra },
  };
}

function result(reply) {
  if (reply.error) throw new Error(`JSON-RPC error ${JSON.stringify(reply.error)}`);
  return reply.result;
}

const [echoCard, askerCard] = process.argv.slice(2);
const echo = await A2AClient.fromCardUrl(echoCard);
console.log("ok card");

const task = result(await echo.sendMessage(message("hello")));
expect(task.kind === "task" && task.status.state === "completed", JSON.stringify(task));
expect(task.artifacts[0].parts[0].text === "echo: hello\n", JSON.stringify(task.artifacts));
console.log("ok send");

const got = result(await echo.getTask({ id: task.id }));
expect(got.id === task.id && got.status.state === "completed", JSON.stringify(got));
console.log("ok get");

const missing = await echo.getTask({ id: "wkr_0123456789abcdef0123456789abcdef" });
expect(missing.error && missing.error.code === -32001, JSON.stringify(missing));
console.log("ok not-found");

const events = [];
for await (const e of echo.sendMessageStream(message("streamed"))) events.push(e);
expect(events[0].kind === "task", JSON.stringify(events[0]));
const last = events[events.length - 1];
expect(last.kind === "status-update" && last.final && last.status.state === "completed", JSON.stringify(last));
expect(events.some((e) => e.kind === "artifact-update" && e.artifact.parts[0].text === "echo: streamed\n"), "an artifact");
console.log("ok stream");

const started = result(await echo.sendMessage({ ...message("sleep, then echo"), configuration: { blocking: false } }));
expect(["submitted", "working"].includes(started.status.state), JSON.stringify(started.status));
const followed = (async () => {
  const seen = [];
  for await (const e of echo.resubscribeTask({ id: started.id })) seen.push(e);
  return seen;
})();
await new Promise((r) => setTimeout(r, 300));
const canceled = result(await echo.cancelTask({ id: started.id }));
expect(canceled.status.state === "canceled", JSON.stringify(canceled.status));
const seen = await followed;
expect(seen[0].kind === "task", JSON.stringify(seen[0]));
expect(seen[seen.length - 1].status.state === "canceled" && seen[seen.length - 1].final, JSON.stringify(seen));
console.log("ok cancel-resubscribe");

const asker = await A2AClient.fromCardUrl(askerCard);
const asked = result(await asker.sendMessage(message("which branch")));
expect(asked.status.state === "input-required", JSON.stringify(asked.status));
expect(asked.status.message.parts[0].text === "Which branch?", JSON.stringify(asked.status));
const answered = result(await asker.sendMessage(message("main", { taskId: asked.id, contextId: asked.contextId })));
expect(answered.id === asked.id && answered.status.state === "completed", JSON.stringify(answered));
expect(answered.artifacts[0].parts[0].text === "merged into main", JSON.stringify(answered.artifacts));
console.log("ok input-required");
