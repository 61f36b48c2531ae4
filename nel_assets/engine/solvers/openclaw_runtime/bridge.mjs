// nel's in-sandbox bridge for the `openclaw` solver (see openclaw_sandbox.py).
//
//   node bridge.mjs SOCKET_DIR PORT[,PORT...] -- COMMAND [ARGS...]
//
// Listens on the sandbox's own 127.0.0.1:PORT for each PORT and pipes every connection to
// the Unix socket SOCKET_DIR/PORT.sock (nel relays it to the same port on the host), then
// runs COMMAND once every listener is up and exits with its status. The sandbox has no
// network: these sockets are the only way out.
import net from "node:net";
import { spawn } from "node:child_process";

const [dir, portList, sep, ...command] = process.argv.slice(2);
if (sep !== "--" || command.length === 0) {
  process.stderr.write("usage: bridge.mjs SOCKET_DIR PORTS -- COMMAND...\n");
  process.exit(2);
}
const ports = portList.split(",").filter(Boolean).map(Number);

function listen(port) {
  return new Promise((resolve, reject) => {
    const server = net.createServer((client) => {
      const upstream = net.connect(`${dir}/${port}.sock`);
      client.pipe(upstream).on("error", () => client.destroy());
      upstream.pipe(client).on("error", () => upstream.destroy());
      client.on("error", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
    });
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve(server));
  });
}

const servers = await Promise.all(ports.map(listen));
const child = spawn(command[0], command.slice(1), { stdio: "inherit" });
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) {
  process.on(sig, () => child.kill(sig));
}
child.on("exit", (code, signal) => {
  for (const s of servers) s.close();
  process.exit(code ?? (signal ? 128 : 1));
});
