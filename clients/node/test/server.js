// Test support: a real agentry server (AGENTRY_BIN) on a free port with a temporary config, a
// stub exec executor, and a TCP proxy whose connections a test can drop.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, mkdirSync, rmSync, existsSync, readFileSync, chmodSync, openSync, closeSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** The server binary: $AGENTRY_BIN, else the repository's debug build. */
export function agentryBin() {
  const bin = process.env.AGENTRY_BIN
    ? path.resolve(REPO, process.env.AGENTRY_BIN)
    : path.join(REPO, 'target', 'debug', 'agentry');
  if (!existsSync(bin)) throw new Error(`no agentry binary at ${bin}: build it or set AGENTRY_BIN`);
  return bin;
}

// The server's environment: its own HOME, and nothing that would pick the model executor.
function serverEnv(dir) {
  const env = { ...process.env, HOME: path.join(dir, 'home') };
  for (const k of Object.keys(env)) if (k.startsWith('OPENAI_') || k.startsWith('AGENTRY_')) delete env[k];
  return env;
}

/**
 * Starts `agentry serve` on 127.0.0.1:0 (`--print-addr` says which port the system chose) with
 * `config` (YAML lines after listen/home/store). Resolves to {addr, dir, log(), stop()}.
 */
export async function startServer(configLines) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agentry-node-test-'));
  mkdirSync(path.join(dir, 'home'));
  const configFile = path.join(dir, 'config.yaml');
  writeFileSync(configFile, [
    'listen: 127.0.0.1:0',
    `home: ${dir}/home`,
    `store: {path: ${dir}/state/agentry.db}`,
    'shutdown_grace: 5s',
    ...configLines,
    '',
  ].join('\n'));
  const logFile = path.join(dir, 'server.log');
  const logFd = openSync(logFile, 'w');
  const child = spawn(agentryBin(), ['serve', '--config', configFile, '--print-addr'], {
    stdio: ['ignore', 'pipe', logFd],
    env: serverEnv(dir),
  });
  closeSync(logFd);
  // Should the test process die first, its server dies with it.
  const reap = () => child.kill('SIGKILL');
  process.once('exit', reap);
  const log = () => (existsSync(logFile) ? readFileSync(logFile, 'utf8') : '');
  const exited = new Promise((resolve) => child.once('exit', resolve));

  const addr = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`agentry did not print its address in 30 s:\n${log()}`)), 30_000);
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const m = /^listening (\S+)$/m.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`agentry exited ${code} before listening:\n${log()}`));
    });
  });
  child.stdout.resume();

  return {
    addr,
    dir,
    log,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(killer);
      }
      process.off('exit', reap);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A stub agent runtime for the exec executor: the reviewer approves; a prompt `sleep N ...`
 * waits N seconds; a prompt `fail ...` exits 7; anything else answers with one line.
 */
export function writeStubAgent(dir) {
  const file = path.join(dir, 'stub-agent');
  writeFileSync(file, `#!/bin/sh
spec=$(cat)
case $spec in *'"worker_id"'*) ;; *) echo "no spec on stdin" >&2; exit 3 ;; esac
if [ "$AGENTRY_AGENT" = reviewer ]; then printf 'Decision: approve\\nthe stub approves\\n'; exit 0; fi
case $spec in
  *'"prompt":"sleep '*) n=$(printf '%s' "$spec" | sed -n 's/.*"prompt":"sleep \\([0-9]*\\).*/\\1/p'); sleep "\${n:-1}" ;;
  *'"prompt":"fail'*) echo "the stub failed" >&2; exit 7 ;;
esac
echo "stub ok: $AGENTRY_AGENT at depth $AGENTRY_DEPTH"
`);
  chmodSync(file, 0o755);
  return file;
}

/** A TCP proxy to `target` (`host:port`); drop() closes every connection it carries. */
export async function startProxy(target) {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  const sockets = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(port, host);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
    }
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const listenPort = server.address().port;
  return {
    addr: `127.0.0.1:${listenPort}`,
    connections: () => sockets.size / 2,
    drop() {
      for (const s of sockets) s.destroy();
    },
    /** Drops every connection and refuses new ones until reopen(). */
    pause() {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
    reopen() {
      return new Promise((resolve) => server.listen(listenPort, '127.0.0.1', resolve));
    },
    close() {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => (server.listening ? server.close(resolve) : resolve()));
    },
  };
}
