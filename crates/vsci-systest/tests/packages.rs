//! The Debian packages (`make deb`; docs/packages.md).
//!
//! - `packages_hold_what_they_should`: each package's files, dependencies
//!   and settings (no root needed); vsci-dis holds exactly the files of
//!   `make install-dis`, less its list of files.
//! - `lintian_is_clean`: lintian reports no error and no warning (the tags
//!   that stay are overridden in dist/deb/*.lintian-overrides, each with its
//!   reason).
//! - `install_use_and_purge` (root, Debian): `dpkg -i` on this machine, then
//!   everything from the installed files only — the service's group and user
//!   created and nothing started or enabled; the node started by systemd
//!   where systemd runs, else by the unit's own command line (its user, group,
//!   environment file, runtime directory and umask); `vsci status` and
//!   `vsci demo` against it; an example compiled with the installed
//!   pkg-config (and without /usr/local/include, where `make install` may
//!   have put other headers) that loads the installed libsisci.so; a
//!   Dolphin-style program built with `-I/opt/DIS/include -L/opt/DIS/lib64`
//!   that loads the library through the loader entry; the CMake package;
//!   vsci-dis refusing to install over files no package owns. Then
//!   `dpkg --purge`, and the directories the packages touched, the loader
//!   cache, the group and the user are as they were before. A guard purges
//!   the packages on any failure. It leaves `make install`'s files in
//!   /usr/local alone (the packages install under /usr), and it does not
//!   run when the packages were already installed by someone else, or
//!   vsci-dis's part when /opt/DIS is not free.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;

/// In the order dpkg purges them (dependents first).
const PACKAGES: [&str; 4] = ["vsci-dis", "vsci", "libsisci-dev", "libsisci"];
const TOOL_TIMEOUT: Duration = Duration::from_secs(600);
/// Written before `dpkg -i`, removed after the purge: packages installed
/// while it exists were left by a killed run of this test, not by an
/// administrator, and may be purged.
const MARKER: &str = "/var/tmp/vsci-systest-packages.installed";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success()).unwrap_or(false)
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn tool(name: &str, cmd: &mut Command) -> Output {
    run(name, cmd.stdin(Stdio::null()), TOOL_TIMEOUT)
}

fn multiarch() -> String {
    let o = tool("dpkg-architecture", Command::new("dpkg-architecture").arg("-qDEB_HOST_MULTIARCH"));
    o.assert_success();
    o.stdout.trim().to_string()
}

/// `make deb` once per test binary (what `make` built, not rebuilt): the
/// .deb of each package.
fn debs() -> &'static Vec<(&'static str, PathBuf)> {
    static DEBS: OnceLock<Vec<(&'static str, PathBuf)>> = OnceLock::new();
    DEBS.get_or_init(|| {
        let out = build_dir().join("deb-systest");
        let work = build_dir().join("deb-systest-work");
        let _ = fs::remove_dir_all(&out);
        let o = tool(
            "make deb",
            Command::new("make")
                .arg("-C")
                .arg(repo())
                .arg(format!("BUILD={}", build_dir().display()))
                .args(["-o", "all", "-o", "c", "-o", "stage", "deb"])
                .arg(format!("DEB_OUT={}", out.display()))
                .env("DEB_WORK", &work)
                .env_remove("MAKEFLAGS")
                .env_remove("MFLAGS")
                .env_remove("MAKELEVEL"),
        );
        o.assert_success();
        let _ = fs::remove_dir_all(&work);
        let files: Vec<PathBuf> = fs::read_dir(&out).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).collect();
        PACKAGES
            .iter()
            .map(|p| {
                let f = files
                    .iter()
                    .find(|f| f.file_name().unwrap().to_string_lossy().starts_with(&format!("{p}_")))
                    .unwrap_or_else(|| panic!("make deb made no {p} package:\n{}", o.describe()));
                (*p, f.clone())
            })
            .collect()
    })
}

fn deb(pkg: &str) -> &'static Path {
    &debs().iter().find(|(p, _)| *p == pkg).unwrap().1
}

/// The paths a package holds (`/usr/bin/vsci`; directories end in `/`),
/// with each link's target.
fn contents(pkg: &str) -> Vec<(String, Option<String>)> {
    let o = tool("dpkg-deb -c", Command::new("dpkg-deb").arg("-c").arg(deb(pkg)));
    o.assert_success();
    o.stdout
        .lines()
        .filter_map(|l| {
            let name = l.split_whitespace().skip(5).collect::<Vec<_>>().join(" ");
            let (path, link) = match name.split_once(" -> ") {
                Some((p, t)) => (p.to_string(), Some(t.to_string())),
                None => (name, None),
            };
            let path = path.strip_prefix('.').unwrap_or(&path).to_string();
            (path != "/").then_some((path, link))
        })
        .collect()
}

fn field(pkg: &str, name: &str) -> String {
    let o = tool("dpkg-deb -f", Command::new("dpkg-deb").arg("-f").arg(deb(pkg)).arg(name));
    o.assert_success();
    o.stdout.trim().to_string()
}

#[test]
fn packages_hold_what_they_should() {
    if !have("dpkg-deb") {
        println!("SKIPPED: not a Debian system (no dpkg-deb)");
        return;
    }
    let ma = multiarch();
    let version = field("vsci", "Version");
    let has = |pkg: &str, path: &str| {
        let c = contents(pkg);
        assert!(c.iter().any(|(p, _)| p == path), "{pkg} lacks {path}:\n{c:#?}");
    };
    for f in [
        "/usr/bin/vscid",
        "/usr/bin/vsci",
        "/usr/lib/systemd/system/vscid.service",
        "/usr/lib/sysusers.d/vsci.conf",
        "/etc/vsci/vscid.env",
        "/usr/share/vsci/cluster.toml.example",
        "/usr/share/vsci/vscid.env",
        "/usr/share/man/man1/vsci.1.gz",
        "/usr/share/man/man8/vscid.8.gz",
        "/usr/share/doc/vsci/operations.md",
        "/usr/share/doc/vsci/copyright",
    ] {
        has("vsci", f);
    }
    has("libsisci", &format!("/usr/lib/{ma}/libsisci.so"));
    for f in [
        "/usr/include/sisci_api.h".to_string(),
        "/usr/include/dis/dis_types.h".to_string(),
        format!("/usr/lib/{ma}/libsisci.a"),
        format!("/usr/lib/{ma}/pkgconfig/sisci.pc"),
        "/usr/share/cmake/SISCI/SISCIConfig.cmake".to_string(),
    ] {
        has("libsisci-dev", &f);
    }
    // Dependencies: the C library from dpkg-shlibdeps, each package on the
    // one below it at the same version, QEMU only suggested.
    assert!(field("vsci", "Depends").contains("libc6"), "vsci Depends: {}", field("vsci", "Depends"));
    assert!(field("libsisci", "Depends").contains("libc6"));
    assert_eq!(field("libsisci-dev", "Depends"), format!("libsisci (= {version})"));
    assert_eq!(field("vsci-dis", "Depends"), format!("libsisci-dev (= {version})"));
    assert!(field("vsci", "Suggests").contains("qemu-system-x86") && !field("vsci", "Depends").contains("qemu"));
    assert!(field("vsci", "Recommends").contains("libfabric1"));

    // The files themselves.
    let x = TempDir::new("deb-x");
    for p in ["vsci", "libsisci", "libsisci-dev"] {
        tool("dpkg-deb -x", Command::new("dpkg-deb").arg("-x").arg(deb(p)).arg(&x.path)).assert_success();
    }
    let unit = fs::read_to_string(x.path.join("usr/lib/systemd/system/vscid.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/bin/vscid --node-id ${VSCI_NODE_ID} --socket /run/vsci/vscid.sock"),
        "{unit}"
    );
    assert!(unit.contains("Documentation=file:/usr/share/doc/vsci/operations.md"), "{unit}");
    let pc = fs::read_to_string(x.path.join(format!("usr/lib/{ma}/pkgconfig/sisci.pc"))).unwrap();
    assert!(pc.contains("prefix=/usr\n") && pc.contains(&format!("libdir=${{prefix}}/lib/{ma}\n")), "{pc}");
    assert!(!pc.contains("rpath"), "no rpath to a directory the loader searches anyway:\n{pc}");
    let so = x.path.join(format!("usr/lib/{ma}/libsisci.so"));
    let re = tool("readelf -d", Command::new("readelf").arg("-d").arg(&so));
    assert!(re.stdout.contains("Library soname: [libsisci.so]"), "{}", re.stdout);
    assert_eq!(fs::metadata(&so).unwrap().mode() & 0o777, 0o644);
    let man = tool(
        "man -l",
        Command::new("man").arg("-l").arg(x.path.join("usr/share/man/man1/vsci.1.gz")).env("MANWIDTH", "80"),
    );
    if man.status.success() {
        for cmd in ["status", "demo", "bench", "vm run"] {
            assert!(man.stdout.contains(cmd), "vsci(1) lacks {cmd}:\n{}", man.stdout);
        }
    }

    // vsci-dis: install-dis's files, less its list (which uninstall-dis
    // would use to remove the package's files); headers and libraries are
    // links to libsisci-dev's and libsisci's.
    let dis = TempDir::new("dis-list");
    let o = tool(
        "make install-dis",
        Command::new("make")
            .arg("-C")
            .arg(repo())
            .arg(format!("BUILD={}", build_dir().display()))
            .arg("install-dis")
            .arg(format!("DESTDIR={}", dis.path.display()))
            .env_remove("MAKEFLAGS")
            .env_remove("MFLAGS")
            .env_remove("MAKELEVEL"),
    );
    o.assert_success();
    let want: BTreeSet<String> = fs::read_to_string(dis.path.join("opt/DIS/share/vsci/installed-files"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(String::from)
        .collect();
    let c = contents("vsci-dis");
    let got: BTreeSet<String> =
        c.iter().filter(|(p, _)| !p.ends_with('/') && !p.starts_with("/usr/share/")).map(|(p, _)| p.clone()).collect();
    assert_eq!(got, want, "vsci-dis's files are not make install-dis's");
    for (p, link) in c.iter().filter(|(p, _)| !p.ends_with('/')) {
        if p.starts_with("/opt/DIS/include/") {
            assert_eq!(link.as_deref(), Some(&*p.replace("/opt/DIS/include/", "/usr/include/")), "{p}");
        }
        if p.starts_with("/opt/DIS/lib64/libsisci.") {
            assert_eq!(link.as_deref(), Some(&*p.replace("/opt/DIS/lib64/", &format!("/usr/lib/{ma}/"))), "{p}");
        }
    }
}

#[test]
fn lintian_is_clean() {
    if !have("dpkg-deb") {
        println!("SKIPPED: not a Debian system (no dpkg-deb)");
        return;
    }
    assert!(have("lintian"), "lintian is not installed: run scripts/install-deps.sh");
    let mut cmd = Command::new("lintian");
    cmd.args(["--fail-on", "error,warning"]);
    for (_, f) in debs() {
        cmd.arg(f);
    }
    let o = tool("lintian", &mut cmd);
    let tags: Vec<&str> = o.stdout.lines().filter(|l| l.starts_with("E:") || l.starts_with("W:")).collect();
    assert!(
        o.status.success() && tags.is_empty(),
        "lintian (dist/deb/*.lintian-overrides say why each remaining tag is accepted):\n{}",
        o.describe()
    );
    println!("{}", o.stdout);
}

// ---- the installed packages ------------------------------------------------

/// dpkg's state of a package: `None` when it is not installed at all.
fn dpkg_status(pkg: &str) -> Option<String> {
    let o = Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]).stdin(Stdio::null()).output().ok()?;
    let s = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !s.is_empty() && !s.ends_with("not-installed")).then_some(s)
}

fn dpkg_purge() -> Output {
    tool("dpkg --purge", Command::new("dpkg").arg("--purge").args(PACKAGES))
}

/// Purges the packages when dropped, also while a failed test unwinds.
struct Installed;

impl Drop for Installed {
    // Nothing here may panic.
    fn drop(&mut self) {
        if Path::new("/run/systemd/system").is_dir() {
            let _ = Command::new("systemctl").args(["stop", "vscid.service"]).stdin(Stdio::null()).status();
        }
        let ok = Command::new("dpkg").arg("--purge").args(PACKAGES).stdin(Stdio::null()).stdout(Stdio::null()).status();
        if matches!(ok, Ok(s) if s.success()) {
            let _ = fs::remove_file(MARKER);
        }
    }
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

fn list_into(dir: &Path, recursive: bool, out: &mut BTreeSet<String>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
        out.insert(format!("{}{}", p.display(), if is_dir { "/" } else { "" }));
        if recursive && is_dir {
            list_into(&p, true, out);
        }
    }
}

fn getent(db: &str, name: &str) -> bool {
    Command::new("getent").args([db, name]).stdout(Stdio::null()).status().map(|s| s.success()).unwrap_or(false)
}

/// The loader cache's libsisci entries, in its order.
fn cached_libsisci() -> Vec<String> {
    let o = tool("ldconfig -p", Command::new("ldconfig").arg("-p"));
    o.stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("libsisci.so "))
        .filter_map(|l| l.rsplit("=> ").next().map(|s| s.trim().to_string()))
        .collect()
}

/// What the packages could leave behind or take away: the entries of every
/// directory they put something in, of the places their maintainer scripts
/// write (systemd's and deb-systemd-helper's links, /var/lib/vsci, /run/vsci)
/// and of `make install`'s directories in /usr/local; the group and the
/// user; the loader cache's libsisci entries. The shadow tools' backups
/// and lock in /etc (passwd-, group-, ...) come and go with any user
/// change and are left out.
fn snapshot(dirs: &BTreeSet<PathBuf>) -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    for d in dirs {
        list_into(d, false, &mut s);
    }
    for d in [
        "/etc/systemd/system",
        "/var/lib/systemd/deb-systemd-helper-enabled",
        "/var/lib/systemd/deb-systemd-helper-masked",
        "/var/lib/vsci",
        "/etc/vsci",
        "/run/vsci",
        "/opt/DIS",
    ] {
        list_into(Path::new(d), true, &mut s);
    }
    for d in ["/usr/local/bin", "/usr/local/lib", "/usr/local/include", "/usr/local/share", "/var/lib"] {
        list_into(Path::new(d), false, &mut s);
    }
    s.retain(|p| {
        !matches!(p.as_str(), "/etc/passwd-" | "/etc/group-" | "/etc/shadow-" | "/etc/gshadow-" | "/etc/.pwd.lock")
    });
    s.insert(format!("group vsci: {}", getent("group", "vsci")));
    s.insert(format!("user vscid: {}", getent("passwd", "vscid")));
    for (i, l) in cached_libsisci().iter().enumerate() {
        s.insert(format!("loader cache {i}: {l}"));
    }
    s
}

/// The libsisci.so `exe` loads, resolved (links followed).
fn loaded_libsisci(exe: &Path, ld_library_path: Option<&str>) -> PathBuf {
    let mut c = Command::new("ldd");
    c.arg(exe).env_remove("LD_LIBRARY_PATH");
    if let Some(p) = ld_library_path {
        c.env("LD_LIBRARY_PATH", p);
    }
    let o = tool("ldd", &mut c);
    o.assert_success();
    let line = o
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("libsisci.so"))
        .unwrap_or_else(|| panic!("{} does not need libsisci.so:\n{}", exe.display(), o.stdout))
        .to_string();
    let path = line.split("=> ").nth(1).and_then(|r| r.split(" (").next()).unwrap_or_default().trim().to_string();
    fs::canonicalize(&path).unwrap_or_else(|e| panic!("ldd: {line}: {e}"))
}

/// The compiler's own include directories without /usr/local/include, for
/// `-nostdinc`: the program is compiled against the packages' headers even
/// where `make install` put other copies in /usr/local/include (which the
/// compiler searches before /usr/include).
fn system_includes_without_local() -> Vec<String> {
    let o = run("cc -v", Command::new("cc").args(["-xc", "-E", "-v", "-"]).stdin(Stdio::null()), TOOL_TIMEOUT);
    o.assert_success();
    let text = o.stderr;
    let start = text.find("#include <...> search starts here:").expect("cc -v lists its include directories");
    let end = text[start..].find("End of search list.").expect("end of cc's list") + start;
    let dirs: Vec<String> =
        text[start..end].lines().skip(1).map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect();
    let mut args = vec!["-nostdinc".to_string()];
    for d in dirs.iter().filter(|d| !d.starts_with("/usr/local/")) {
        args.push("-isystem".into());
        args.push(d.clone());
    }
    args
}

/// The unit's settings, as systemd reads them (the keys this unit uses).
struct Unit {
    exec_start: String,
    environment: Vec<(String, String)>,
    environment_files: Vec<String>,
    user: String,
    group: String,
    runtime_directory: String,
    runtime_directory_mode: u32,
    umask: u32,
}

fn parse_unit(text: &str) -> Unit {
    let mut u = Unit {
        exec_start: String::new(),
        environment: vec![],
        environment_files: vec![],
        user: String::new(),
        group: String::new(),
        runtime_directory: String::new(),
        runtime_directory_mode: 0o755,
        umask: 0o022,
    };
    for line in text.lines().map(str::trim) {
        let Some((k, v)) = line.split_once('=') else { continue };
        if line.starts_with('#') {
            continue;
        }
        match k {
            "ExecStart" => u.exec_start = v.to_string(),
            "Environment" => {
                for w in v.split_whitespace() {
                    if let Some((a, b)) = w.trim_matches('"').split_once('=') {
                        u.environment.push((a.to_string(), b.to_string()));
                    }
                }
            }
            "EnvironmentFile" => u.environment_files.push(v.to_string()),
            "User" => u.user = v.to_string(),
            "Group" => u.group = v.to_string(),
            "RuntimeDirectory" => u.runtime_directory = v.to_string(),
            "RuntimeDirectoryMode" => u.runtime_directory_mode = u32::from_str_radix(v, 8).unwrap(),
            "UMask" => u.umask = u32::from_str_radix(v, 8).unwrap(),
            _ => {}
        }
    }
    assert!(!u.exec_start.is_empty() && !u.user.is_empty() && !u.runtime_directory.is_empty(), "unit:\n{text}");
    u
}

/// KEY=VALUE lines of an environment file (comments and blank lines skipped).
fn env_file(path: &Path) -> Vec<(String, String)> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string())))
        .collect()
}

/// ExecStart's words as systemd expands them: `${VAR}` is replaced within a
/// word, a word that is `$VAR` becomes the value's words.
fn expand(exec: &str, env: &[(String, String)]) -> Vec<String> {
    let get = |k: &str| env.iter().rev().find(|(a, _)| a == k).map(|(_, b)| b.clone()).unwrap_or_default();
    let mut out = vec![];
    for w in exec.split_whitespace() {
        if let Some(name) = w.strip_prefix('$').filter(|n| !n.starts_with('{')) {
            out.extend(get(name).split_whitespace().map(String::from));
            continue;
        }
        let mut s = w.to_string();
        while let Some(i) = s.find("${") {
            let j = s[i..].find('}').expect("closing brace") + i;
            let v = get(&s[i + 2..j]);
            s.replace_range(i..=j, &v);
        }
        out.push(s);
    }
    out
}

/// A node started the way the unit starts it.
enum Node {
    Systemd,
    Unit { proc: Proc, _runtime: TempDir },
}

fn uid_gid(user: &str, group: &str) -> (u32, u32) {
    let id = |args: &[&str]| {
        let o = tool("id", Command::new("id").args(args));
        o.assert_success();
        o.stdout.trim().parse::<u32>().unwrap()
    };
    (id(&["-u", user]), group_gid(group).expect("the unit's group exists"))
}

fn wait_socket(socket: &Path, proc: Option<&mut Proc>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut proc = proc;
    loop {
        if let Some(p) = proc.as_deref_mut() {
            if let Some(st) = p.try_wait() {
                panic!("vscid ended ({}) while starting:\n{}", describe_status(st), p.stderr_text());
            }
        }
        if let Some(fd) = seqpacket_connect(socket) {
            close_fd(fd);
            return;
        }
        assert!(Instant::now() < deadline, "nothing accepts on {} after 30 s", socket.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Start the node: with systemd where it runs, else the unit's command line
/// as the unit would run it (user, group, environment, runtime directory
/// under a temporary directory instead of /run, umask). Returns the node
/// and its socket.
fn start_node(unit: &Unit) -> (Node, PathBuf) {
    if Path::new("/run/systemd/system").is_dir() {
        println!("systemd runs here: systemctl start vscid");
        tool("systemctl start", Command::new("systemctl").args(["start", "vscid.service"])).assert_success();
        let socket = PathBuf::from("/run/vsci/vscid.sock");
        wait_socket(&socket, None);
        return (Node::Systemd, socket);
    }
    println!("systemd does not run here: the unit's ExecStart, run as the unit says");
    let mut env = unit.environment.clone();
    for f in &unit.environment_files {
        let (optional, path) = match f.strip_prefix('-') {
            Some(p) => (true, p),
            None => (false, f.as_str()),
        };
        assert!(optional || Path::new(path).exists(), "EnvironmentFile {path} is missing");
        env.extend(env_file(Path::new(path)));
    }
    let runtime = TempDir::new("run");
    let rundir = runtime.path.join(&unit.runtime_directory);
    fs::create_dir(&rundir).unwrap();
    let (uid, gid) = uid_gid(&unit.user, &unit.group);
    std::os::unix::fs::chown(&rundir, Some(uid), Some(gid)).unwrap();
    fs::set_permissions(&rundir, fs::Permissions::from_mode(unit.runtime_directory_mode)).unwrap();
    let run_prefix = format!("/run/{}", unit.runtime_directory);
    let argv: Vec<String> = expand(&unit.exec_start, &env)
        .into_iter()
        .map(|a| if a.starts_with(&run_prefix) { a.replacen(&run_prefix, &rundir.display().to_string(), 1) } else { a })
        .collect();
    println!("ExecStart: {}", argv.join(" "));
    assert_eq!(argv[0], "/usr/bin/vscid");
    let socket = PathBuf::from(&argv[argv.iter().position(|a| a == "--socket").expect("--socket") + 1]);
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", &unit.user, "--regid", &unit.group, "--init-groups", "--"]).args(&argv);
    cmd.env_clear().env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let umask = unit.umask as libc::mode_t;
    // SAFETY: umask(2) is async-signal-safe and touches no memory.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(umask);
            Ok(())
        });
    }
    let mut proc = Proc::spawn("vscid (the unit's ExecStart)", cmd.stdin(Stdio::null()));
    wait_socket(&socket, Some(&mut proc));
    (Node::Unit { proc, _runtime: runtime }, socket)
}

fn stop_node(node: Node, socket: &Path) {
    match node {
        Node::Systemd => {
            tool("systemctl stop", Command::new("systemctl").args(["stop", "vscid.service"])).assert_success();
        }
        Node::Unit { proc, _runtime } => {
            proc.signal(libc::SIGTERM);
            let o = proc.wait(Duration::from_secs(20));
            assert!(o.status.success(), "vscid did not stop cleanly on SIGTERM:\n{}", o.describe());
        }
    }
    assert!(!exists(socket), "the socket {} outlived the node", socket.display());
}

#[test]
fn install_use_and_purge() {
    if !is_root() || !have("dpkg") {
        println!("SKIPPED: installing packages needs root on a Debian system");
        return;
    }
    let marker = Path::new(MARKER);
    let present: Vec<(&str, String)> = PACKAGES.iter().filter_map(|p| dpkg_status(p).map(|s| (*p, s))).collect();
    if !present.is_empty() {
        if !marker.exists() {
            println!("SKIPPED: vsci's packages are installed on this machine ({present:?}), not by this test: it would remove them");
            return;
        }
        println!("purging the packages a killed run of this test left ({present:?})");
        dpkg_purge().assert_success();
        let _ = fs::remove_file(marker);
    }
    let ma = multiarch();
    let libdir = format!("/usr/lib/{ma}");
    let ours = fs::canonicalize(&libdir).unwrap().join("libsisci.so");
    // vsci-dis only where /opt/DIS is free (Dolphin's software, or a `make
    // install-dis`, would be in the way: the package refuses both).
    let dis_free = !exists(Path::new("/opt/DIS")) && !exists(Path::new("/etc/ld.so.conf.d/00-vsci-dis.conf"));
    if !dis_free {
        println!("note: /opt/DIS or the loader entry exists: vsci-dis is not installed by this test");
    }

    let mut dirs = BTreeSet::new();
    for p in PACKAGES {
        for (path, _) in contents(p) {
            if let Some(parent) = Path::new(path.trim_end_matches('/')).parent() {
                dirs.insert(parent.to_path_buf());
            }
        }
    }
    let before = snapshot(&dirs);
    let had_group = getent("group", "vsci");
    let had_user = getent("passwd", "vscid");

    // Install (everything but vsci-dis first).
    fs::write(marker, "vsci's packages installed by crates/vsci-systest/tests/packages.rs\n").unwrap();
    let guard = Installed;
    let t0 = Instant::now();
    tool("dpkg -i", Command::new("dpkg").arg("-i").arg(deb("libsisci")).arg(deb("libsisci-dev")).arg(deb("vsci")))
        .assert_success();
    let mut installed_files: Vec<String> = vec![];
    let dpkg_list = |p: &str| -> Vec<String> {
        let o = tool("dpkg -L", Command::new("dpkg").arg("-L").arg(p));
        o.assert_success();
        o.stdout.lines().map(String::from).collect()
    };
    for p in ["vsci", "libsisci", "libsisci-dev"] {
        installed_files.extend(dpkg_list(p));
    }

    // The maintainer scripts: group and user there, nothing started or enabled.
    assert!(getent("group", "vsci") && getent("passwd", "vscid"), "postinst did not create group vsci and user vscid");
    let created = fs::read_to_string("/var/lib/vsci/created-by-package").unwrap_or_default();
    assert_eq!(created.contains("group vsci"), !had_group, "recorded: {created:?}");
    assert_eq!(created.contains("user vscid"), !had_user, "recorded: {created:?}");
    assert!(
        !exists(Path::new("/etc/systemd/system/multi-user.target.wants/vscid.service")),
        "the package enabled the service"
    );
    let running = Command::new("pgrep")
        .args(["-u", "vscid"])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(!running, "the package started something as user vscid");
    let cache = cached_libsisci();
    assert!(
        cache.iter().any(|l| fs::canonicalize(l).ok().as_deref() == Some(&*ours)),
        "the loader cache lacks {} (ldconfig trigger): {cache:?}",
        ours.display()
    );

    // The node, as the service runs it.
    let unit = parse_unit(&fs::read_to_string("/usr/lib/systemd/system/vscid.service").unwrap());
    let (node, socket) = start_node(&unit);
    let meta = fs::metadata(&socket).unwrap();
    let (uid, gid) = uid_gid("vscid", "vsci");
    assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o777), (uid, gid, 0o660), "the socket's owner, group and mode");

    let client = |program: &Path| {
        let mut c = Command::new(program);
        c.env("VSCI_SOCKET", &socket).env_remove("LD_LIBRARY_PATH").stdin(Stdio::null());
        c
    };
    tool("vsci status", client(Path::new("/usr/bin/vsci")).args(["status", "--socket"]).arg(&socket)).assert_success();
    let demo = tool(
        "vsci demo",
        client(Path::new("/usr/bin/vsci"))
            .args(["demo", "--round-trips", "200", "--stream-bytes", "16777216", "--socket"])
            .arg(&socket),
    );
    demo.assert_success().assert_contains("demo finished");
    println!("{}", demo.stdout);

    // An example built with the installed pkg-config and headers, loading
    // the installed library.
    let work = TempDir::new("pkg-build");
    let pc = tool(
        "pkg-config",
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "sisci"])
            .env("PKG_CONFIG_LIBDIR", format!("{libdir}/pkgconfig"))
            .env_remove("PKG_CONFIG_PATH"),
    );
    pc.assert_success();
    assert!(!pc.stdout.contains("/usr/local") && !pc.stdout.contains("build"), "pkg-config sisci: {}", pc.stdout);
    let shmem = work.path.join("shmem");
    let mut cc = Command::new("cc");
    cc.args(system_includes_without_local())
        .args(["-O2", "-Wall", "-o"])
        .arg(&shmem)
        .arg(repo().join("examples/shmem.c"))
        .args(pc.stdout.split_whitespace());
    tool("cc shmem.c $(pkg-config --cflags --libs sisci)", &mut cc).assert_success();
    let mut ld_path = None;
    if loaded_libsisci(&shmem, None) != ours {
        // Another libsisci.so comes first in the cache: `make install`'s in
        // /usr/local/lib (libc.conf sorts before <multiarch>.conf).
        println!("note: the loader picks another libsisci.so first ({cache:?}); running with LD_LIBRARY_PATH={libdir}");
        ld_path = Some(libdir.clone());
    }
    assert_eq!(loaded_libsisci(&shmem, ld_path.as_deref()), ours);
    let with_path = |mut c: Command| {
        if let Some(p) = &ld_path {
            c.env("LD_LIBRARY_PATH", p);
        }
        c
    };
    let mut sc = with_path(client(&shmem));
    let server = Proc::spawn("shmem -server", sc.args(["-server", "-size", "1m"]));
    let mut cc = with_path(client(&shmem));
    let c = run("shmem -client", cc.args(["-client", "-size", "1m"]), PROGRAM_TIMEOUT);
    let s = server.wait(PROGRAM_TIMEOUT);
    s.assert_success();
    c.assert_success();

    // The CMake package: find_package(SISCI) finds /usr's.
    let cm = work.path.join("cmake");
    let conf = tool(
        "cmake configure",
        Command::new("cmake")
            .arg("-S")
            .arg(repo().join("tests/dolphin"))
            .arg("-B")
            .arg(&cm)
            .arg("-DCMAKE_PREFIX_PATH=/usr")
            .env_remove("SISCI_DIR")
            .env_remove("CMAKE_PREFIX_PATH"),
    );
    conf.assert_success().assert_contains("from /usr/share/cmake/SISCI");
    tool("cmake --build", Command::new("cmake").arg("--build").arg(&cm).args(["--target", "dolphin_style_c17"]))
        .assert_success();
    let ds = tool("dolphin_style (CMake)", &mut with_path(client(&cm.join("dolphin_style_c17"))));
    ds.assert_success().assert_contains("DOLPHIN STYLE OK");

    if dis_free {
        // vsci-dis refuses to install over a file no package owns (as
        // Dolphin's own software would have there), and changes nothing.
        fs::create_dir_all("/opt/DIS/lib64").unwrap();
        fs::write("/opt/DIS/lib64/libsisci.so", "not vsci's").unwrap();
        let refused =
            tool("dpkg -i vsci-dis (over a foreign file)", Command::new("dpkg").arg("-i").arg(deb("vsci-dis")));
        let foreign = fs::read_to_string("/opt/DIS/lib64/libsisci.so");
        fs::remove_dir_all("/opt/DIS").unwrap();
        assert!(!refused.status.success(), "vsci-dis installed over a foreign file:\n{}", refused.describe());
        assert!(refused.stderr.contains("belong to no package"), "{}", refused.describe());
        assert_eq!(foreign.unwrap(), "not vsci's", "the foreign file was changed");
        assert!(dpkg_status("vsci-dis").is_none(), "vsci-dis: {:?}", dpkg_status("vsci-dis"));

        // Installed: a program built the Dolphin way loads the library
        // through the loader entry, without an rpath.
        tool("dpkg -i vsci-dis", Command::new("dpkg").arg("-i").arg(deb("vsci-dis"))).assert_success();
        installed_files.extend(dpkg_list("vsci-dis"));
        let exe = work.path.join("dolphin_style");
        tool(
            "cc dolphin_style.c (Dolphin's flags)",
            Command::new("cc")
                .args(["-std=c17", "-Wall", "-Wextra", "-pedantic", "-Werror", "-o"])
                .arg(&exe)
                .arg(repo().join("tests/dolphin/dolphin_style.c"))
                .args(["-I/opt/DIS/include", "-I/opt/DIS/include/dis", "-L/opt/DIS/lib64", "-lsisci"]),
        )
        .assert_success();
        let picked = tool("ldd", Command::new("ldd").arg(&exe).env_remove("LD_LIBRARY_PATH"));
        assert!(picked.stdout.contains("libsisci.so => /opt/DIS/lib64/libsisci.so"), "{}", picked.stdout);
        assert_eq!(loaded_libsisci(&exe, None), ours);
        tool("dolphin_style (/opt/DIS)", &mut client(&exe)).assert_success().assert_contains("DOLPHIN STYLE OK");
    }

    stop_node(node, &socket);
    println!("installed and used in {:.1} s", t0.elapsed().as_secs_f64());

    // Purge: nothing the packages installed or created is left, nothing else went.
    dpkg_purge().assert_success();
    std::mem::forget(guard);
    let _ = fs::remove_file(marker);
    for f in installed_files.iter().filter(|f| f.as_str() != "/.") {
        let p = Path::new(f);
        assert!(
            !exists(p) || before.contains(f.as_str()) || before.contains(&format!("{f}/")),
            "{f} is left after the purge"
        );
    }
    let after = snapshot(&dirs);
    let added: Vec<&String> = after.difference(&before).collect();
    let removed: Vec<&String> = before.difference(&after).collect();
    assert!(added.is_empty() && removed.is_empty(), "the purge left {added:#?}\nand took away {removed:#?}");
}
