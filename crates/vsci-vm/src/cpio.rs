//! A writer for the `newc` cpio format, the one the Linux kernel unpacks as an
//! initramfs. Archives may be concatenated: the kernel unpacks each in turn,
//! later entries replacing earlier ones, which is how a run's own files go on
//! top of the cached base image.

use std::collections::BTreeSet;

/// An archive being built in memory. Paths are absolute guest paths
/// ("/bin/sh"); missing parent directories are added with mode 0755.
pub struct Cpio {
    buf: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
    finished: bool,
}

pub const S_IFDIR: u32 = 0o040000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFLNK: u32 = 0o120000;
pub const S_IFCHR: u32 = 0o020000;

impl Default for Cpio {
    fn default() -> Self {
        Self::new()
    }
}

impl Cpio {
    pub fn new() -> Cpio {
        Cpio { buf: Vec::new(), ino: 1, dirs: BTreeSet::new(), finished: false }
    }

    /// Add a directory (and its parents).
    pub fn dir(&mut self, path: &str, mode: u32) {
        let p = norm(path);
        if p.is_empty() || self.dirs.contains(&p) {
            return;
        }
        self.parents(&p);
        self.dirs.insert(p.clone());
        self.entry(&p, S_IFDIR | (mode & 0o7777), 2, 0, 0, &[]);
    }

    /// Add a regular file.
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        let p = norm(path);
        self.parents(&p);
        self.entry(&p, S_IFREG | (mode & 0o7777), 1, 0, 0, data);
    }

    /// Add a symbolic link.
    pub fn symlink(&mut self, path: &str, target: &str) {
        let p = norm(path);
        self.parents(&p);
        self.entry(&p, S_IFLNK | 0o777, 1, 0, 0, target.as_bytes());
    }

    /// Add a character device node.
    pub fn char_dev(&mut self, path: &str, mode: u32, major: u32, minor: u32) {
        let p = norm(path);
        self.parents(&p);
        self.entry(&p, S_IFCHR | (mode & 0o7777), 1, major, minor, &[]);
    }

    /// Close the archive with its trailer and return the bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 1, 0, 0, &[]);
        self.finished = true;
        std::mem::take(&mut self.buf)
    }

    fn parents(&mut self, p: &str) {
        if let Some(i) = p.rfind('/') {
            let parent = p[..i].to_string();
            if !parent.is_empty() && !self.dirs.contains(&parent) {
                self.dir(&parent, 0o755);
            }
        }
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, rmajor: u32, rminor: u32, data: &[u8]) {
        let ino = self.ino;
        self.ino += 1;
        let fields = [
            ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: fixed, so equal inputs give equal archives
            data.len() as u32,
            0,
            0,
            rmajor,
            rminor,
            name.len() as u32 + 1,
            0,
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
}

/// "/a//b/" -> "a/b": cpio names carry no leading slash.
fn norm(path: &str) -> String {
    path.split('/').filter(|c| !c.is_empty() && *c != ".").collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_newc() {
        let mut c = Cpio::new();
        c.file("/a/b", 0o644, b"hi");
        let out = c.finish();
        let s = String::from_utf8_lossy(&out);
        // directory "a" first, then "a/b", then the trailer
        assert!(s.starts_with("070701"));
        assert!(s.contains("a\0"));
        assert!(s.contains("a/b\0"));
        assert!(s.contains("TRAILER!!!\0"));
        assert_eq!(out.len() % 4, 0);
        // header of "a/b": mode 0100644, size 2, namesize 4
        let i = s.find("a/b\0").unwrap() - 110;
        assert_eq!(&s[i + 14..i + 22], "000081a4");
        assert_eq!(&s[i + 54..i + 62], "00000002");
        assert_eq!(&s[i + 94..i + 102], "00000004");
    }

    #[test]
    fn paths_are_normalised() {
        assert_eq!(norm("/bin//sh"), "bin/sh");
        assert_eq!(norm("./x/"), "x");
    }
}
