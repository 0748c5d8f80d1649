//! Just enough QMP to put segment memory into a running guest and take it out
//! again: a memfd goes in with `add-fd`, becomes a `memory-backend-file` with
//! `mem-path=/proc/self/fd/N` (the one form QEMU 7.2 accepts for a passed
//! descriptor), and is plugged as an `ivshmem-plain` device; removal is
//! `device_del`, the guest's `DEVICE_DELETED`, then `object-del`.

use std::io::{BufRead, BufReader, IoSlice, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use serde_json::{json, Value};

/// A QMP connection in command mode.
pub struct Qmp {
    sock: UnixStream,
    reader: BufReader<UnixStream>,
    /// Events read while waiting for command replies, oldest first.
    pending: Vec<Value>,
    timeout: Duration,
}

/// A memfd plugged into a guest.
#[derive(Clone, Debug)]
pub struct Plugged {
    pub object: String,
    pub device: String,
}

impl Qmp {
    /// Connect to QEMU's `-qmp unix:PATH,server=on,wait=off`, retrying until
    /// the socket exists (QEMU may still be starting) or `timeout` passes, and
    /// enter command mode.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Qmp> {
        let deadline = Instant::now() + timeout;
        let sock = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    log::debug!("qmp connect {}: {e}", path.display());
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e).with_context(|| format!("connect to QMP at {}", path.display())),
            }
        };
        let step = Duration::from_secs(30);
        sock.set_read_timeout(Some(step))?;
        let reader = BufReader::new(sock.try_clone()?);
        let mut q = Qmp { sock, reader, pending: Vec::new(), timeout: step };
        let greeting = q.read()?;
        if greeting.get("QMP").is_none() {
            bail!("not a QMP greeting: {greeting}");
        }
        q.execute("qmp_capabilities", json!({}))?;
        Ok(q)
    }

    /// How long one command may take.
    pub fn set_timeout(&mut self, t: Duration) -> Result<()> {
        self.timeout = t;
        self.sock.set_read_timeout(Some(t))?;
        Ok(())
    }

    fn read(&mut self) -> Result<Value> {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).context("read from QMP")?;
        if n == 0 {
            bail!("QMP connection closed (QEMU exited?)");
        }
        serde_json::from_str(&line).with_context(|| format!("bad QMP line {line:?}"))
    }

    /// Run a command and return its `return` value; `error` replies become errors.
    pub fn execute(&mut self, cmd: &str, args: Value) -> Result<Value> {
        self.execute_fd(cmd, args, None)
    }

    /// Like [`execute`](Self::execute), passing `fd` with the command (SCM_RIGHTS).
    pub fn execute_fd(&mut self, cmd: &str, args: Value, fd: Option<BorrowedFd>) -> Result<Value> {
        let mut msg = json!({ "execute": cmd });
        if args.as_object().is_some_and(|o| !o.is_empty()) {
            msg["arguments"] = args;
        }
        let mut text = serde_json::to_vec(&msg)?;
        text.push(b'\n');
        match fd {
            Some(fd) => {
                let raw = [fd.as_raw_fd()];
                let iov = [IoSlice::new(&text)];
                let n = sendmsg::<()>(
                    self.sock.as_raw_fd(),
                    &iov,
                    &[ControlMessage::ScmRights(&raw)],
                    MsgFlags::MSG_NOSIGNAL,
                    None,
                )
                .with_context(|| format!("send {cmd} to QMP"))?;
                if n != text.len() {
                    bail!("short write of {cmd} to QMP");
                }
            }
            None => self.sock.write_all(&text).with_context(|| format!("send {cmd} to QMP"))?,
        }
        loop {
            let v = self.read()?;
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                bail!("QMP {cmd}: {}", e.get("desc").and_then(Value::as_str).unwrap_or(&e.to_string()));
            }
            if v.get("event").is_some() {
                self.pending.push(v);
            }
        }
    }

    /// Wait for an event named `name` whose `data` satisfies `pred`.
    pub fn wait_event(&mut self, name: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Result<Value> {
        let matches = |v: &Value| {
            v.get("event").and_then(Value::as_str) == Some(name) && pred(v.get("data").unwrap_or(&Value::Null))
        };
        if let Some(i) = self.pending.iter().position(matches) {
            return Ok(self.pending.remove(i));
        }
        let deadline = Instant::now() + timeout;
        let saved = self.timeout;
        let res = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Err(anyhow!("no {name} event within {timeout:?}"));
            }
            self.sock.set_read_timeout(Some(left))?;
            match self.read() {
                Ok(v) if matches(&v) => break Ok(v),
                Ok(v) => {
                    if v.get("event").is_some() {
                        self.pending.push(v);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        self.sock.set_read_timeout(Some(saved))?;
        res
    }

    /// Pass `fd` into QEMU: returns (fdset-id, QEMU's own descriptor number).
    pub fn add_fd(&mut self, fd: BorrowedFd) -> Result<(i64, i64)> {
        let r = self.execute_fd("add-fd", json!({}), Some(fd))?;
        let set = r.get("fdset-id").and_then(Value::as_i64).ok_or_else(|| anyhow!("add-fd: no fdset-id in {r}"))?;
        let qfd = r.get("fd").and_then(Value::as_i64).ok_or_else(|| anyhow!("add-fd: no fd in {r}"))?;
        Ok((set, qfd))
    }

    pub fn remove_fd(&mut self, fdset: i64) -> Result<()> {
        self.execute("remove-fd", json!({ "fdset-id": fdset }))?;
        Ok(())
    }

    /// Plug a memfd (or any shareable file) of `size` bytes into the guest as
    /// an ivshmem-plain device named `id`, at PCI slot `slot` if given (so
    /// the guest can tell which window it is). QEMU reopens the memfd through
    /// /proc, so the passed descriptor is released again at once.
    pub fn plug_memfd(&mut self, id: &str, fd: BorrowedFd, size: u64, slot: Option<u8>) -> Result<Plugged> {
        let object = format!("{id}-mem");
        let (set, qfd) = self.add_fd(fd)?;
        let added = self.execute(
            "object-add",
            json!({ "qom-type": "memory-backend-file", "id": object, "mem-path": format!("/proc/self/fd/{qfd}"),
                    "size": size, "share": true }),
        );
        let removed = self.remove_fd(set);
        added?;
        removed?;
        let mut dev = json!({ "driver": "ivshmem-plain", "id": id, "memdev": object });
        if let Some(s) = slot {
            dev["addr"] = json!(format!("{s:#x}"));
        }
        if let Err(e) = self.execute("device_add", dev) {
            let _ = self.execute("object-del", json!({ "id": object }));
            return Err(e);
        }
        Ok(Plugged { object, device: id.to_string() })
    }

    /// Plug an ivshmem-doorbell device `id` connected to the ivshmem server at
    /// `socket` (a guest's control channel, attached at run time). QEMU reads
    /// the server's setup messages before `device_add` returns.
    pub fn plug_doorbell(&mut self, id: &str, socket: &Path, vectors: u16) -> Result<()> {
        let chardev = format!("{id}-chr");
        self.execute(
            "chardev-add",
            json!({ "id": chardev, "backend": { "type": "socket", "data": {
                "addr": { "type": "unix", "data": { "path": socket.to_string_lossy() } }, "server": false } } }),
        )?;
        let dev = json!({ "driver": "ivshmem-doorbell", "id": id, "chardev": chardev, "vectors": vectors });
        if let Err(e) = self.execute("device_add", dev) {
            let _ = self.execute("chardev-remove", json!({ "id": chardev }));
            return Err(e);
        }
        Ok(())
    }

    /// Unplug a device and wait for the guest to let go; then remove the
    /// chardev `chardev` if given (for a doorbell device: the server then sees
    /// the client leave).
    ///
    /// Beware: QEMU 7.2 leaves main-loop handlers on an unplugged doorbell
    /// device's closed vector eventfds; QEMU then spins a core and may crash
    /// later when the descriptor numbers are reused (docs/vm.md). Unplug
    /// doorbell devices only from guests that are about to end.
    pub fn unplug_device(&mut self, id: &str, chardev: Option<&str>, timeout: Duration) -> Result<()> {
        self.execute("device_del", json!({ "id": id }))?;
        self.wait_event("DEVICE_DELETED", timeout, |d| d.get("device").and_then(Value::as_str) == Some(id))?;
        if let Some(c) = chardev {
            self.execute("chardev-remove", json!({ "id": c }))?;
        }
        Ok(())
    }

    /// Unplug: `device_del`, wait until the guest let go (`DEVICE_DELETED`),
    /// then drop the memory object.
    pub fn unplug(&mut self, p: &Plugged, timeout: Duration) -> Result<()> {
        self.unplug_device(&p.device, None, timeout)?;
        self.execute("object-del", json!({ "id": p.object }))?;
        Ok(())
    }
}
