//! The guest image: a Debian 6.1 kernel and an initramfs holding busybox, the
//! vsci_guest driver, an /init that runs one command, the C runtime and
//! libsisci (when one is installed next to `vsci`).
//!
//! Built once and cached under `$VSCI_CACHE` (default `~/.cache/vsci/guest`):
//!
//! ```text
//! debs/                      the pinned kernel packages (apt-get download)
//! kernel-VERSION/            vmlinuz and the extracted headers + kbuild
//! modules/MKEY/vsci_guest.ko  the driver, per kernel pin and driver source
//! images/KEY/{vmlinuz,initrd.cpio,vsci_guest.ko}
//! ```
//!
//! KEY is a hash of every input (kernel pin, driver sources, /init, busybox,
//! the C runtime files, libsisci), so a change to any of them builds a new image and an
//! unchanged setup reuses the old one. A run's own files (`--add`, the command)
//! go into a second, small archive appended at boot (see [`run_archive`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::cpio::Cpio;

/// guest/kernel-version: the one place the guest kernel is pinned.
pub const KERNEL_PIN: &str = include_str!("../../../guest/kernel-version");
const DRIVER_C: &str = include_str!("../../../guest/driver/vsci_guest.c");
const DRIVER_H: &str = include_str!("../../../guest/driver/vsci_guest.h");
const DRIVER_KBUILD: &str = include_str!("../../../guest/driver/Kbuild");
const INIT: &str = include_str!("../../../guest/init");
/// Bump when the image layout changes in a way the inputs do not show.
const FORMAT: &str = "vsci-guest-image-3";

/// Modules of the pinned kernel the image carries, by set, each in load
/// order: the virtio PCI core, virtio-blk (disks QEMU attaches: `vsci vm
/// run --drive`), virtio-net (`--net user`), and nbd (the kernel's NBD
/// client, for a guest that attaches an NBD export itself). /init loads
/// the first three when such a device is present; nbd is loaded by the
/// command that wants it (`insmod /lib/modules/nbd/nbd.ko`).
const MODULE_SETS: &[(&str, &[&str])] = &[
    (
        "virtio",
        &[
            "drivers/virtio/virtio_ring.ko",
            "drivers/virtio/virtio.ko",
            "drivers/virtio/virtio_pci_modern_dev.ko",
            "drivers/virtio/virtio_pci_legacy_dev.ko",
            "drivers/virtio/virtio_pci.ko",
        ],
    ),
    ("blk", &["drivers/block/virtio_blk.ko"]),
    ("net", &["net/core/failover.ko", "drivers/net/net_failover.ko", "drivers/net/virtio_net.ko"]),
    ("nbd", &["drivers/block/nbd.ko"]),
];

const BUSYBOX: &str = "/bin/busybox";
/// The C runtime every image carries, so ordinary dynamically linked programs
/// run; `--add`ed programs bring whatever else `ldd` names.
const BASE_LIBS: &[&str] = &[
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/x86_64-linux-gnu/libm.so.6",
    "/lib/x86_64-linux-gnu/libpthread.so.0",
    "/lib/x86_64-linux-gnu/libdl.so.2",
    "/lib/x86_64-linux-gnu/librt.so.1",
    "/lib/x86_64-linux-gnu/libgcc_s.so.1",
];

/// The pinned kernel: Debian ABI name and package version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelPin {
    pub abi: String,
    pub version: String,
    /// linux-kbuild-6.1's version: the pinned one, unless [`KernelPin::resolve`]
    /// found only another Debian revision of the same upstream kernel.
    pub kbuild: String,
}

impl KernelPin {
    pub fn parse(text: &str) -> Result<KernelPin> {
        let mut abi = None;
        let mut version = None;
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            match line.split_once('=') {
                Some(("abi", v)) => abi = Some(v.trim().to_string()),
                Some(("version", v)) => version = Some(v.trim().to_string()),
                _ => bail!("guest/kernel-version: unexpected line {line:?}"),
            }
        }
        let version = version.ok_or_else(|| anyhow!("guest/kernel-version: no version="))?;
        Ok(KernelPin {
            abi: abi.ok_or_else(|| anyhow!("guest/kernel-version: no abi="))?,
            kbuild: version.clone(),
            version,
        })
    }

    pub fn pinned() -> KernelPin {
        KernelPin::parse(KERNEL_PIN).expect("guest/kernel-version is well formed (checked by a unit test)")
    }

    /// `apt-get download` arguments, each pinned to the version.
    pub fn packages(&self) -> Vec<String> {
        vec![
            format!("linux-image-{}-amd64={}", self.abi, self.version),
            format!("linux-headers-{}-amd64={}", self.abi, self.version),
            format!("linux-headers-{}-common={}", self.abi, self.version),
            // the archive also holds older linux-kbuild-6.1 builds: pin it too
            format!("linux-kbuild-6.1={}", self.kbuild),
        ]
    }

    /// The pin as the archive serves it now. Debian's security archive keeps
    /// only the newest build of each package: linux-kbuild-6.1 (built from
    /// the source package `linux`) moves to a new Debian revision before the
    /// signed image does (seen: kbuild 6.1.192-3 beside image 6.1.192-2),
    /// and a pinned image is removed once the next one is out. So each
    /// package is taken at the pinned version where the archive has it;
    /// kbuild otherwise at the newest revision of the same upstream version
    /// (the same build tools); and when the pinned image itself is gone, the
    /// kernel Debian's `linux-image-amd64` depends on now, said in one line.
    /// Without apt's lists (or apt) the pin stays as it is and the download
    /// says what is missing.
    pub fn resolve(&self, say: &dyn Fn(&str)) -> KernelPin {
        let mut pin = self.clone();
        let image = format!("linux-image-{}-amd64", pin.abi);
        let images = archive_versions(&image);
        if !images.is_empty() && !images.contains(&pin.version) {
            if let Some((abi, version)) = current_kernel() {
                say(&format!(
                    "the pinned kernel {} {} is gone from the archive; using {abi} {version} (update guest/kernel-version)",
                    pin.abi, pin.version
                ));
                pin = KernelPin { abi, kbuild: version.clone(), version };
            }
        }
        let kbuilds = archive_versions("linux-kbuild-6.1");
        if !kbuilds.is_empty() && !kbuilds.contains(&pin.kbuild) {
            let upstream = |v: &str| v.rsplit_once('-').map_or(v.to_string(), |(u, _)| u.to_string());
            let want = upstream(&pin.version);
            if let Some(v) = kbuilds.iter().filter(|v| upstream(v) == want).max_by(|a, b| debian_revision_cmp(a, b)) {
                pin.kbuild = v.clone();
            }
        }
        pin
    }
}

/// Versions of `package` the configured archives hold (`apt-cache
/// madison`); empty when apt cannot say.
fn archive_versions(package: &str) -> Vec<String> {
    let Ok(out) = Command::new("apt-cache").args(["madison", package]).stdin(Stdio::null()).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('|').map(str::trim);
            (f.next() == Some(package)).then(|| f.next().map(str::to_string)).flatten()
        })
        .collect()
}

/// The kernel `linux-image-amd64` depends on now: (ABI, version).
fn current_kernel() -> Option<(String, String)> {
    let out = Command::new("apt-cache")
        .args(["show", "--no-all-versions", "linux-image-amd64"])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let deps = text.lines().find_map(|l| l.strip_prefix("Depends:"))?;
    // "linux-image-6.1.0-56-amd64 (= 6.1.192-2)"
    let dep = deps.split(',').map(str::trim).find(|d| d.starts_with("linux-image-6.1.0-"))?;
    let (name, rest) = dep.split_once(' ').unwrap_or((dep, ""));
    let abi = name.strip_prefix("linux-image-")?.strip_suffix("-amd64")?.to_string();
    let version = rest.trim().strip_prefix("(=")?.strip_suffix(')')?.trim().to_string();
    Some((abi, version))
}

/// Order two Debian versions of one upstream release by their revision
/// (`6.1.192-2` < `6.1.192-3` < `6.1.192-10`).
fn debian_revision_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let rev = |v: &str| -> Vec<u64> {
        v.rsplit_once('-')
            .map_or("", |(_, r)| r)
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect()
    };
    rev(a).cmp(&rev(b))
}

/// A built image.
#[derive(Clone, Debug)]
pub struct Image {
    /// the host file carried as the guest's libsisci.so, if any
    pub libsisci: Option<PathBuf>,
    pub dir: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub module: PathBuf,
    pub key: String,
}

/// `$VSCI_CACHE`, else `$XDG_CACHE_HOME/vsci/guest`, else `~/.cache/vsci/guest`.
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("VSCI_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME").filter(|p| !p.is_empty()) {
        return PathBuf::from(p).join("vsci/guest");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".cache/vsci/guest")
}

/// The image for the current inputs: the cached one, or a new build.
/// `say` gets one line per slow step.
pub fn ensure_image(say: &dyn Fn(&str)) -> Result<Image> {
    let cache = cache_dir();
    let pin = KernelPin::pinned();
    let libs = base_libs()?;
    let sisci = libsisci();
    let key = image_key(&pin, &libs, sisci.as_deref())?;
    let dir = cache.join("images").join(&key);
    let image = Image {
        libsisci: sisci.clone(),
        kernel: dir.join("vmlinuz"),
        initrd: dir.join("initrd.cpio"),
        module: dir.join("vsci_guest.ko"),
        dir: dir.clone(),
        key: key.clone(),
    };
    if image.initrd.exists() && image.kernel.exists() {
        return Ok(image);
    }
    fs::create_dir_all(cache.join("images")).with_context(|| format!("create {}", cache.display()))?;
    // One builder at a time; a second `vsci vm run` waits, then finds the image.
    let _lock = lock(&cache.join("lock"))?;
    if image.initrd.exists() && image.kernel.exists() {
        return Ok(image);
    }
    // half-built images of runs that were killed (we hold the lock: no one else builds)
    for e in fs::read_dir(cache.join("images"))?.flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            let _ = fs::remove_dir_all(e.path());
        }
    }
    let t0 = std::time::Instant::now();
    let pin = pin.resolve(say);
    say(&format!("building the guest image {key} (kernel {} {}) in {}", pin.abi, pin.version, cache.display()));
    let kdir = ensure_kernel(&cache, &pin, say)?;
    let ko = ensure_module(&cache, &kdir, &pin)?;
    let tmp = cache.join("images").join(format!(".{key}.{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    fs::copy(&ko, tmp.join("vsci_guest.ko"))?;
    fs::copy(kdir.join(format!("boot/vmlinuz-{}-amd64", pin.abi)), tmp.join("vmlinuz"))?;
    if let Some(l) = &sisci {
        say(&format!("the image carries {} as /usr/lib/x86_64-linux-gnu/libsisci.so", l.display()));
    }
    let extra = ensure_extra_modules(&cache, &kdir, &pin)?;
    let cpio = base_archive(&fs::read(&ko)?, &extra, &libs, sisci.as_deref())?;
    fs::write(tmp.join("initrd.cpio"), cpio)?;
    let _ = fs::remove_dir_all(&dir);
    fs::rename(&tmp, &dir).with_context(|| format!("rename {} to {}", tmp.display(), dir.display()))?;
    say(&format!("guest image ready in {:.1} s", t0.elapsed().as_secs_f64()));
    Ok(image)
}

/// The base C runtime files present on this host.
fn base_libs() -> Result<Vec<PathBuf>> {
    let libs: Vec<PathBuf> = BASE_LIBS.iter().map(PathBuf::from).filter(|p| p.exists()).collect();
    for need in ["/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"] {
        if !Path::new(need).exists() {
            bail!("{need} is missing: the guest image copies the host's C runtime (Debian 12 amd64)");
        }
    }
    Ok(libs)
}

/// The libsisci the image carries: `$VSCI_LIBSISCI` (empty: none), else the
/// one installed next to this program (`BIN/../lib/libsisci.so` as `make
/// install` puts it, or `BIN/../lib/<multiarch>/libsisci.so` as the Debian
/// package libsisci does), if any.
pub fn libsisci() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("VSCI_LIBSISCI") {
        return (!p.is_empty()).then(|| PathBuf::from(p)).filter(|p| p.is_file());
    }
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?;
    let multiarch = format!("../lib/{}-linux-gnu/libsisci.so", std::env::consts::ARCH);
    ["../lib/libsisci.so", multiarch.as_str()].iter().map(|p| bin.join(p)).find(|p| p.is_file())
}

fn hex(d: &[u8]) -> String {
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The module, built once per kernel pin and driver source.
fn ensure_module(cache: &Path, kdir: &Path, pin: &KernelPin) -> Result<PathBuf> {
    let mut h = Sha256::new();
    for part in [&pin.abi, &pin.version, DRIVER_C, DRIVER_H, DRIVER_KBUILD] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let dir = cache.join("modules").join(hex(&h.finalize()));
    let ko = dir.join("vsci_guest.ko");
    if ko.exists() {
        return Ok(ko);
    }
    let _ = fs::remove_dir_all(&dir);
    let built = build_module(kdir, pin, &dir)?;
    debug_assert_eq!(built, ko);
    Ok(ko)
}

fn image_key(pin: &KernelPin, libs: &[PathBuf], sisci: Option<&Path>) -> Result<String> {
    let mut h = Sha256::new();
    for part in [FORMAT, &pin.abi, &pin.version, DRIVER_C, DRIVER_H, DRIVER_KBUILD, INIT] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    if let Some(l) = sisci {
        h.update(b"libsisci");
        h.update(fs::read(l).with_context(|| format!("read {}", l.display()))?);
    }
    let bb = fs::read(BUSYBOX).with_context(|| format!("read {BUSYBOX}: install busybox-static"))?;
    h.update(&bb);
    for l in libs {
        h.update(l.to_string_lossy().as_bytes());
        h.update(fs::read(l).with_context(|| format!("read {}", l.display()))?);
    }
    Ok(hex(&h.finalize()))
}

/// An exclusive flock, released when the file closes.
fn lock(path: &Path) -> Result<File> {
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))?;
    // SAFETY: flock(2) on a descriptor we own; no memory is involved.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        bail!("lock {}: {}", path.display(), std::io::Error::last_os_error());
    }
    Ok(f)
}

/// Download (once) and extract (once) the pinned kernel and its headers.
fn ensure_kernel(cache: &Path, pin: &KernelPin, say: &dyn Fn(&str)) -> Result<PathBuf> {
    let kdir = cache.join(format!("kernel-{}-{}", pin.abi, pin.version));
    let done = kdir.join(".complete");
    if done.exists() {
        return Ok(kdir);
    }
    let debs = cache.join("debs");
    fs::create_dir_all(&debs)?;
    let mut files = Vec::new();
    let mut missing = Vec::new();
    for p in pin.packages() {
        let (name, ver) = p.split_once('=').unwrap();
        // Debian file names escape ':' of epochs as %3a; these have none.
        let pat = format!("{name}_{ver}_");
        match find_deb(&debs, &pat)? {
            Some(f) => files.push(f),
            None => missing.push(p),
        }
    }
    if !missing.is_empty() {
        say(&format!("apt-get download {}", missing.join(" ")));
        let out = Command::new("apt-get")
            .arg("download")
            .args(&missing)
            .current_dir(&debs)
            .stdin(Stdio::null())
            .output()
            .context("run apt-get download (Debian's apt is needed to fetch the guest kernel)")?;
        if !out.status.success() {
            bail!(
                "apt-get download {} failed: {}\nhint: run `apt-get update`; if the version is gone from the archive, \
                 pin a newer one in guest/kernel-version",
                missing.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        files.clear();
        for p in pin.packages() {
            let (name, ver) = p.split_once('=').unwrap();
            files.push(
                find_deb(&debs, &format!("{name}_{ver}_"))?.ok_or_else(|| anyhow!("apt-get download gave no {p}"))?,
            );
        }
    }
    say("extracting the kernel and its headers");
    let _ = fs::remove_dir_all(&kdir);
    fs::create_dir_all(&kdir)?;
    // Only /boot from the image package: its 4,900 module files are not needed
    // (everything the guest uses is built into Debian's kernel).
    let image_deb = &files[0];
    let mut deb = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(image_deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("run dpkg-deb")?;
    let st = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&kdir)
        .arg(format!("./boot/vmlinuz-{}-amd64", pin.abi))
        .arg(format!("./boot/config-{}-amd64", pin.abi))
        .stdin(deb.stdout.take().unwrap())
        .status()
        .context("run tar")?;
    let dst = deb.wait()?;
    if !st.success() || !dst.success() {
        bail!("could not extract /boot from {}", image_deb.display());
    }
    for f in &files[1..] {
        let st = Command::new("dpkg-deb").arg("-x").arg(f).arg(&kdir).status().context("run dpkg-deb -x")?;
        if !st.success() {
            bail!("dpkg-deb -x {} failed", f.display());
        }
    }
    // The arch headers' Makefile includes the common ones by an absolute
    // /usr/src path; point it into our copy.
    let mk = kdir.join(format!("usr/src/linux-headers-{}-amd64/Makefile", pin.abi));
    let text = fs::read_to_string(&mk).with_context(|| format!("read {}", mk.display()))?;
    let fixed = text.replace("include /usr/src/", &format!("include {}/usr/src/", kdir.display()));
    fs::write(&mk, fixed)?;
    File::create(&done)?;
    Ok(kdir)
}

/// The [`MODULE_SETS`] of the pinned kernel, extracted from its image
/// package once (into KERNEL_DIR/extra-modules): (set, file name, contents).
fn ensure_extra_modules(cache: &Path, kdir: &Path, pin: &KernelPin) -> Result<Vec<(String, String, Vec<u8>)>> {
    let dir = kdir.join("extra-modules");
    let inside = |m: &str| format!("./lib/modules/{}-amd64/kernel/{m}", pin.abi);
    let all: Vec<(&str, &str)> = MODULE_SETS.iter().flat_map(|(set, ms)| ms.iter().map(move |m| (*set, *m))).collect();
    if !all.iter().all(|(_, m)| dir.join(inside(m)).exists()) {
        let deb = find_deb(&cache.join("debs"), &format!("linux-image-{}-amd64_{}_", pin.abi, pin.version))?
            .ok_or_else(|| anyhow!("the kernel image package is no longer in {}", cache.join("debs").display()))?;
        fs::create_dir_all(&dir)?;
        let mut pkg = Command::new("dpkg-deb")
            .arg("--fsys-tarfile")
            .arg(&deb)
            .stdout(Stdio::piped())
            .spawn()
            .context("run dpkg-deb")?;
        let st = Command::new("tar")
            .arg("-x")
            .arg("-C")
            .arg(&dir)
            .args(all.iter().map(|(_, m)| inside(m)))
            .stdin(pkg.stdout.take().expect("piped"))
            .status()
            .context("run tar")?;
        if !st.success() || !pkg.wait()?.success() {
            bail!("could not extract the virtio and nbd modules from {}", deb.display());
        }
    }
    all.iter()
        .map(|(set, m)| {
            let name = Path::new(m).file_name().expect("a file").to_string_lossy().to_string();
            Ok((set.to_string(), name, fs::read(dir.join(inside(m))).with_context(|| format!("read {m}"))?))
        })
        .collect()
}

fn find_deb(dir: &Path, prefix: &str) -> Result<Option<PathBuf>> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let n = e.file_name().to_string_lossy().to_string();
        if n.starts_with(prefix) && n.ends_with(".deb") {
            return Ok(Some(e.path()));
        }
    }
    Ok(None)
}

/// Build vsci_guest.ko from the embedded sources against the pinned headers.
fn build_module(kdir: &Path, pin: &KernelPin, build: &Path) -> Result<PathBuf> {
    fs::create_dir_all(build)?;
    fs::write(build.join("vsci_guest.c"), DRIVER_C)?;
    fs::write(build.join("vsci_guest.h"), DRIVER_H)?;
    fs::write(build.join("Kbuild"), DRIVER_KBUILD)?;
    let hdr = kdir.join(format!("usr/src/linux-headers-{}-amd64", pin.abi));
    let out = Command::new("make")
        .arg("-C")
        .arg(&hdr)
        .arg(format!("M={}", build.display()))
        .arg("modules")
        .stdin(Stdio::null())
        .output()
        .context("run make (install build-essential)")?;
    let ko = build.join("vsci_guest.ko");
    if !out.status.success() || !ko.exists() {
        bail!(
            "building vsci_guest.ko failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(ko)
}

/// The base initramfs: directories, /init, busybox and its applets, the
/// driver, the C runtime and a minimal /etc.
fn base_archive(
    module: &[u8],
    extra: &[(String, String, Vec<u8>)],
    libs: &[PathBuf],
    sisci: Option<&Path>,
) -> Result<Vec<u8>> {
    let mut c = Cpio::new();
    for d in
        ["/bin", "/sbin", "/usr/bin", "/usr/sbin", "/etc", "/proc", "/sys", "/dev", "/tmp", "/root", "/run", "/vsci"]
    {
        c.dir(d, 0o755);
    }
    c.dir("/tmp", 0o1777);
    // the kernel opens /dev/console for init before devtmpfs is mounted
    c.char_dev("/dev/console", 0o600, 5, 1);
    c.char_dev("/dev/null", 0o666, 1, 3);
    c.file("/init", 0o755, INIT.as_bytes());
    c.file(
        "/bin/busybox",
        0o755,
        &fs::read(BUSYBOX).with_context(|| format!("read {BUSYBOX}: install busybox-static"))?,
    );
    for applet in busybox_applets()? {
        if applet != "/bin/busybox" {
            c.symlink(&applet, "/bin/busybox");
        }
    }
    c.file("/lib/modules/vsci_guest.ko", 0o644, module);
    for (set, _) in MODULE_SETS {
        let mut order = String::new();
        for (_, name, data) in extra.iter().filter(|(s, _, _)| s == set) {
            c.file(&format!("/lib/modules/{set}/{name}"), 0o644, data);
            order += &format!("{name}\n");
        }
        c.file(&format!("/lib/modules/{set}/order"), 0o644, order.as_bytes());
    }
    for l in libs {
        add_host_file(&mut c, l, &l.to_string_lossy())?;
    }
    if let Some(l) = sisci {
        // where the dynamic linker looks without an ld.so.cache
        add_host_file(&mut c, l, "/usr/lib/x86_64-linux-gnu/libsisci.so")?;
        for dep in ldd(l)? {
            if !libs.contains(&dep) {
                add_host_file(&mut c, &dep, &dep.to_string_lossy())?;
            }
        }
    }
    // uid 1000 lets tests and users check that the device files work for
    // someone who is not root
    c.file("/etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/tmp:/bin/sh\n");
    c.file("/etc/group", 0o644, b"root:x:0:\nuser:x:1000:\n");
    Ok(c.finish())
}

fn busybox_applets() -> Result<Vec<String>> {
    let out =
        Command::new(BUSYBOX).arg("--list-full").output().with_context(|| format!("run {BUSYBOX} --list-full"))?;
    if !out.status.success() {
        bail!("{BUSYBOX} --list-full failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(|l| format!("/{}", l.trim())).filter(|l| l.len() > 1).collect())
}

/// Copy a host file (following symlinks) into the archive at `guest`.
fn add_host_file(c: &mut Cpio, host: &Path, guest: &str) -> Result<()> {
    let data = fs::read(host).with_context(|| format!("read {}", host.display()))?;
    let mode = fs::metadata(host)?.permissions().mode();
    c.file(guest, mode & 0o7777, &data);
    Ok(())
}

/// Shared objects `ldd` says `path` needs (empty for static programs and
/// non-ELF files such as scripts). Libraries ldd cannot find are left out.
pub fn ldd(path: &Path) -> Result<Vec<PathBuf>> {
    Ok(ldd_full(path)?.0)
}

/// `ldd`: (libraries found, names of libraries not found).
pub fn ldd_full(path: &Path) -> Result<(Vec<PathBuf>, Vec<String>)> {
    let out = Command::new("ldd").arg(path).stdin(Stdio::null()).output().context("run ldd")?;
    if !out.status.success() {
        return Ok((Vec::new(), Vec::new())); // "not a dynamic executable"
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    let mut missing = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.contains("=> not found") {
            missing.push(line.split_whitespace().next().unwrap_or("?").to_string());
            continue;
        }
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
        // "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let p = match line.split_once("=>") {
            Some((_, rhs)) => rhs.trim(),
            None => line,
        };
        let p = p.split(" (").next().unwrap_or("").trim();
        if p.starts_with('/') {
            libs.push(PathBuf::from(p));
        }
    }
    Ok((libs, missing))
}

/// What one run adds on top of the base image.
pub struct RunFiles<'a> {
    pub name: &'a str,
    pub nonce: &'a str,
    pub command: &'a [String],
    /// (host path, guest path)
    pub adds: &'a [(PathBuf, String)],
    /// extra environment for the command
    pub env: &'a [(String, String)],
    /// the base image carries libsisci
    pub has_libsisci: bool,
    /// where warnings go
    pub warn: &'a dyn Fn(&str),
}

/// The second initramfs archive of a run: the command, its environment and the
/// `--add`ed files with their `ldd` dependencies.
pub fn run_archive(r: &RunFiles) -> Result<Vec<u8>> {
    let mut c = Cpio::new();
    let base: BTreeSet<&str> = BASE_LIBS.iter().copied().collect();
    let mut libs: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (host, guest) in r.adds {
        if !guest.starts_with('/') {
            bail!("--add {}:{guest}: the guest path must be absolute", host.display());
        }
        let meta = fs::metadata(host).with_context(|| format!("--add {}", host.display()))?;
        if meta.is_dir() {
            add_tree(&mut c, host, guest)?;
            continue;
        }
        add_host_file(&mut c, host, guest)?;
        let (found, missing) = ldd_full(host)?;
        for m in missing {
            // the image's own libsisci is found in the guest without help
            if !(m == "libsisci.so" && r.has_libsisci) {
                (r.warn)(&format!(
                    "{} needs {m}, which ldd cannot find here: add it too, or it will not start",
                    host.display()
                ));
            }
        }
        for l in found {
            let key = l.to_string_lossy().to_string();
            if !base.contains(key.as_str()) {
                libs.insert(key, l);
            }
        }
    }
    let mut lib_dirs = BTreeSet::new();
    for (guest, host) in &libs {
        add_host_file(&mut c, host, guest)?;
        if let Some(d) = Path::new(guest).parent() {
            lib_dirs.insert(d.to_string_lossy().to_string());
        }
    }
    let mut env = String::new();
    // the guest has no ld.so.cache: name the directories ldd found libraries in
    let std_dirs = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib", "/lib64"];
    let extra: Vec<&String> = lib_dirs.iter().filter(|d| !std_dirs.contains(&d.as_str())).collect();
    if !extra.is_empty() {
        let joined: Vec<&str> = extra.iter().map(|s| s.as_str()).collect();
        env.push_str(&format!("export LD_LIBRARY_PATH={}\n", shell_quote(&joined.join(":"))));
    }
    for (k, v) in r.env {
        if k.is_empty()
            || !k.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            || k.starts_with(|ch: char| ch.is_ascii_digit())
        {
            bail!("bad environment variable name {k:?}");
        }
        env.push_str(&format!("export {k}={}\n", shell_quote(v)));
    }
    c.file("/vsci/env", 0o644, env.as_bytes());
    c.file("/vsci/nonce", 0o644, r.nonce.as_bytes());
    c.file("/vsci/name", 0o644, r.name.as_bytes());
    let quoted: Vec<String> = r.command.iter().map(|a| shell_quote(a)).collect();
    c.file("/vsci/cmd", 0o644, format!("exec {}\n", quoted.join(" ")).as_bytes());
    Ok(c.finish())
}

fn add_tree(c: &mut Cpio, host: &Path, guest: &str) -> Result<()> {
    let mode = fs::metadata(host)?.permissions().mode();
    c.dir(guest, mode & 0o7777);
    for e in fs::read_dir(host)? {
        let e = e?;
        let g = format!("{}/{}", guest.trim_end_matches('/'), e.file_name().to_string_lossy());
        if fs::metadata(e.path())?.is_dir() {
            add_tree(c, &e.path(), &g)?;
        } else {
            add_host_file(c, &e.path(), &g)?;
        }
    }
    Ok(())
}

/// Single-quote for the guest's shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Write base image + run archive into one initrd file (the kernel unpacks
/// concatenated archives in order).
pub fn write_initrd(image: &Image, run: &[u8], dst: &Path) -> Result<()> {
    let mut f = File::create(dst).with_context(|| format!("create {}", dst.display()))?;
    let mut base = File::open(&image.initrd)?;
    std::io::copy(&mut base, &mut f)?;
    f.write_all(run)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_parses() {
        let p = KernelPin::pinned();
        assert!(p.abi.starts_with("6.1.0-"), "{p:?}");
        assert!(p.version.starts_with("6.1."), "{p:?}");
        assert_eq!(p.packages().len(), 4);
        assert!(KernelPin::parse("abi=1\n").is_err());
        assert!(KernelPin::parse("abi=1\nversion=2\nbogus\n").is_err());
        assert_eq!(p.kbuild, p.version);
    }

    #[test]
    fn debian_revisions_order() {
        use std::cmp::Ordering::*;
        assert_eq!(debian_revision_cmp("6.1.192-2", "6.1.192-3"), Less);
        assert_eq!(debian_revision_cmp("6.1.192-10", "6.1.192-3"), Greater);
        assert_eq!(debian_revision_cmp("6.1.192-3", "6.1.192-3"), Equal);
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn run_archive_has_command_and_rejects_relative_paths() {
        let cmd = vec!["/bin/sh".to_string(), "-c".to_string(), "echo 'x'; exit 3".to_string()];
        let a = run_archive(&RunFiles {
            name: "g",
            nonce: "n",
            command: &cmd,
            adds: &[],
            env: &[],
            has_libsisci: false,
            warn: &|_| {},
        })
        .unwrap();
        let s = String::from_utf8_lossy(&a);
        assert!(s.contains("exec '/bin/sh' '-c' 'echo '\\''x'\\''; exit 3'"));
        let adds = vec![(PathBuf::from("/bin/busybox"), "rel/path".to_string())];
        assert!(run_archive(&RunFiles {
            name: "g",
            nonce: "n",
            command: &cmd,
            adds: &adds,
            env: &[],
            has_libsisci: false,
            warn: &|_| {}
        })
        .is_err());
    }

    #[test]
    fn ldd_of_a_dynamic_program_names_libc() {
        let libs = ldd(Path::new("/bin/ls")).unwrap();
        assert!(libs.iter().any(|l| l.to_string_lossy().contains("libc.so.6")), "{libs:?}");
        assert!(ldd(Path::new("/bin/busybox")).unwrap().is_empty());
    }
}
