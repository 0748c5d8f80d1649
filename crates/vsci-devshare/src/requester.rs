//! Asking the platform manager: a signed request to the device's
//! interrupt, the signed answer on an interrupt of ours.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use vsci_client::{Client, DataWait, IntrKind, LocalInterrupt, RemoteInterrupt, SciError};

use crate::msg::{self, Reply, ReplyFor, ReplyTo, Request, RequestFrom, ToDevice, ToHost};

pub struct Requester {
    pub client: Client,
    key: Vec<u8>,
    pub device: Arc<RemoteInterrupt>,
    inbox: Arc<LocalInterrupt>,
}

impl Requester {
    pub fn new(client: Client, key: Vec<u8>, device_node: u32, device_interrupt: u32) -> Result<Requester> {
        let device = client
            .connect_interrupt(IntrKind::Data, device_node, device_interrupt, 5000)
            .map_err(|e| anyhow!("cannot reach the device on node {device_node} (interrupt {device_interrupt:#x}): {e}; is `vsci device serve` running there?"))?;
        let inbox = client
            .create_interrupt(IntrKind::Data, 0x4C00, false)
            .map_err(|e| anyhow!("cannot create an interrupt for the answers: {e}"))?;
        Ok(Requester { client, key, device, inbox })
    }

    pub fn call(&self, req: Request, timeout: Duration) -> Result<Reply> {
        let nonce = msg::random_u64();
        let from = RequestFrom {
            node: self.client.node_id(),
            reply: ReplyTo { node: self.client.node_id(), interrupt: self.inbox.number },
            req,
        };
        let m = msg::encode(&ToDevice::Manager(msg::sign(&self.key, nonce, from)));
        self.device.trigger_data(&m).map_err(|e| anyhow!("cannot send the request to the device: {e}"))?;
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; vsci_proto::intr::DATA_MAX];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("the device's manager did not answer within {timeout:?}");
            }
            match self.inbox.wait_data(&mut buf, left.as_millis().max(1) as u32) {
                Ok(DataWait::Got(n)) => {
                    let Some(ToHost::Manager(s)) = msg::decode::<ToHost>(&buf[..n]) else { continue };
                    match msg::open::<ReplyFor>(&self.key, &s) {
                        Ok(env) if env.msg.nonce == nonce => return Ok(env.msg.reply),
                        Ok(_) => {}
                        Err(e) => log::warn!("an answer that is not the manager's: {e}; ignored"),
                    }
                }
                Ok(DataWait::TooSmall(_)) => unreachable!("the buffer holds DATA_MAX"),
                Err(SciError::Timeout) => {}
                Err(e) => bail!("waiting for the manager's answer: {e}"),
            }
        }
    }

    /// Send raw bytes to the device's interrupt.
    pub fn send(&self, m: &ToDevice) -> Result<(), SciError> {
        self.device.trigger_data(&msg::encode(m))
    }

    /// Posted register writes of function `func` (with its assignment's
    /// token), as few messages as fit a data interrupt each, in order. A
    /// device that cannot be reached is logged; the writes are lost, as
    /// posted writes to a vanished device are.
    pub fn send_regs(&self, func: u8, token: u64, writes: &[(u32, u64)]) {
        for chunk in chunk_writes(func, token, writes) {
            if let Err(e) = self.send(&chunk) {
                log::warn!("cannot reach the device: {e}");
            }
        }
    }

    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

impl Drop for Requester {
    fn drop(&mut self) {
        let _ = self.inbox.remove();
        let _ = self.device.disconnect();
    }
}

/// Split `writes` into messages that each fit a data interrupt.
fn chunk_writes(func: u8, token: u64, writes: &[(u32, u64)]) -> Vec<ToDevice> {
    // postcard's varints: a write takes at most 5 + 10 bytes (values with
    // high bits set, as inline frame bytes and pushes, take all 10); the
    // vector's length prefix, one byte in `empty`, grows by at most two.
    const WORST: usize = 15;
    let empty = msg::encode(&ToDevice::Regs { func, token, writes: Vec::new() }).len();
    let per = (vsci_proto::intr::DATA_MAX - empty - 2) / WORST;
    writes.chunks(per).map(|c| ToDevice::Regs { func, token, writes: c.to_vec() }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_fit_a_data_interrupt_and_keep_order() {
        let writes: Vec<(u32, u64)> = (0..500u64).map(|i| (crate::regs::TX_INLINE, u64::MAX - i)).collect();
        let chunks = chunk_writes(3, u64::MAX, &writes);
        assert!(chunks.len() > 1);
        let mut all = Vec::new();
        for c in &chunks {
            assert!(msg::encode(c).len() <= vsci_proto::intr::DATA_MAX);
            let ToDevice::Regs { writes, .. } = c else { unreachable!() };
            all.extend_from_slice(writes);
        }
        assert_eq!(all, writes);
    }
}
