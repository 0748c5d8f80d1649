//! Who may use the node: the control socket's group and mode.
//!
//! Connecting to a UNIX socket needs write permission on its file, so the
//! socket's owner, group and mode are the node's access list. The socket is
//! given its group and mode *before* `listen`: until then no one can
//! connect, so there is no window in which the umask's default mode lets
//! anyone else in.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use anyhow::{Context, Result};
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use nix::sys::stat::{fchmodat, FchmodatFlags, Mode};
use nix::unistd::{chown, Gid, Group};

/// Mode of the socket when none is given: the owner only, or owner and group
/// when a group is named (what naming a group asks for).
pub fn default_mode(group: Option<Gid>) -> u32 {
    if group.is_some() {
        0o660
    } else {
        0o600
    }
}

/// Parse an octal permission string such as `0660` or `660`.
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let t = t.strip_prefix("0o").unwrap_or(t);
    match u32::from_str_radix(t, 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("{s:?} is not an octal permission mode (e.g. 0660)")),
    }
}

/// A group given by name or by number.
pub fn resolve_group(g: &str) -> Result<Gid> {
    if let Ok(n) = g.parse::<u32>() {
        return Ok(Gid::from_raw(n));
    }
    match Group::from_name(g).with_context(|| format!("looking up group {g:?}"))? {
        Some(grp) => Ok(grp.gid),
        None => anyhow::bail!("no such group {g:?} (--socket-group / socket_group)"),
    }
}

/// Bind the control socket at `path`, give it `group` and `mode`, then
/// listen on it.
pub fn listen(path: &Path, group: Option<Gid>, mode: u32) -> Result<OwnedFd> {
    let fd = socket::socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None)?;
    let addr = UnixAddr::new(path)?;
    socket::bind(fd.as_raw_fd(), &addr).with_context(|| format!("binding {}", path.display()))?;
    if let Some(gid) = group {
        chown(path, None, Some(gid)).with_context(|| format!("giving {} to group {gid}", path.display()))?;
    }
    fchmodat(None, path, Mode::from_bits_truncate(mode), FchmodatFlags::FollowSymlink)
        .with_context(|| format!("setting mode {mode:04o} on {}", path.display()))?;
    socket::listen(&fd, socket::Backlog::new(1024)?)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert_eq!(parse_mode("0660"), Ok(0o660));
        assert_eq!(parse_mode("600"), Ok(0o600));
        assert_eq!(parse_mode("0o666"), Ok(0o666));
        assert!(parse_mode("0999").is_err());
        assert!(parse_mode("1777").is_err());
        assert!(parse_mode("").is_err());
        assert_eq!(default_mode(None), 0o600);
        assert_eq!(default_mode(Some(Gid::from_raw(5))), 0o660);
        assert_eq!(resolve_group("0").unwrap(), Gid::from_raw(0));
        assert_eq!(resolve_group("root").unwrap(), Gid::from_raw(0));
        assert!(resolve_group("no-such-group-vsci-test").is_err());
    }
}
