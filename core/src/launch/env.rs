//! The environment a command gets (docs/environment.md).

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::{Arc, Mutex};

use crate::host::forked::PerProcess;
use crate::spec::request::Spec;

/// The managed variable that tags every process of a command so a kill can
/// find descendants that left the process group (see `tree.rs`).
pub(crate) const EXEC_TAG_VAR: &str = "DSH_EXEC_TAG";

const FORCED: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// True for an inherited name that must not reach a command: anything that
/// looks like a credential, and every ambient managed `DSH_*` name.
pub fn is_scrubbed(name: &[u8]) -> bool {
    let contains = |needle: &[u8]| name.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle));
    name.get(..4).is_some_and(|p| p.eq_ignore_ascii_case(b"DSH_"))
        || contains(b"KEY")
        || contains(b"PASSWORD")
        || contains(b"SECRET")
        || contains(b"TOKEN")
}

type Vars = BTreeMap<Vec<u8>, Vec<u8>>;

/// The host's environment as it was when a command was asked for, already
/// scrubbed. Taken on the calling thread, inside the call: a host mutates
/// its environment from its own threads (Python's `os.environ` under the
/// GIL, Node's `process.env` on the JS thread), never concurrently with its
/// own call into dsh, whereas reading it later from a core thread would race
/// with the host's `setenv` (which reallocates `environ` under our feet).
#[derive(Clone)]
pub(crate) struct HostEnv(Arc<Vars>);

/// The last environment taken, byte for byte as `environ` held it, and its
/// scrubbed form: a host whose environment did not change since (nearly
/// every call) costs one comparison instead of a copy and a scrub. Per
/// process: a child forked while another thread held the lock gets one of
/// its own.
static LAST: PerProcess<Mutex<Option<RawAndScrubbed>>> = PerProcess::new();
type RawAndScrubbed = (Vec<u8>, HostEnv);

extern "C" {
    static environ: *const *const libc::c_char;
}

/// Every entry of the process's environment, each with its NUL, in order.
///
/// # Safety
/// Nothing may change the environment while the iterator lives. That is
/// the contract of every reader of `environ` (C's `getenv`, and why Rust's
/// `set_var` is `unsafe`); see [`HostEnv`] for why the caller's thread
/// keeps it.
unsafe fn environ_entries() -> impl Iterator<Item = &'static [u8]> {
    // SAFETY: `environ` is NULL or a NULL-terminated array of pointers to
    // NUL-terminated strings, unchanged while we read (the caller's promise).
    let mut at = unsafe { environ };
    std::iter::from_fn(move || {
        if at.is_null() {
            return None;
        }
        // SAFETY: `at` points into the array, at or before its NULL end.
        let entry = unsafe { *at };
        if entry.is_null() {
            return None;
        }
        // SAFETY: see above; the next slot exists because this one was not
        // the terminating NULL.
        at = unsafe { at.add(1) };
        // SAFETY: every non-NULL entry is a NUL-terminated string.
        Some(unsafe { CStr::from_ptr(entry) }.to_bytes_with_nul())
    })
}

/// An `environ` entry (with its NUL) as (name, value). As
/// `std::env::vars_os` reads it: the name is everything before the first
/// `=` after the first byte; an entry without one is no variable.
fn variable(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let e = entry.strip_suffix(b"\0").unwrap_or(entry);
    let eq = e.iter().skip(1).position(|&b| b == b'=')? + 1;
    Some((&e[..eq], &e[eq + 1..]))
}

impl HostEnv {
    pub(crate) fn capture() -> Self {
        // SAFETY: we are on the caller's thread, inside its call (above).
        let entries = || unsafe { environ_entries() };
        let mut last = LAST
            .get(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some((raw, env)) = last.as_ref() {
            let mut rest = raw.as_slice();
            let same = entries().all(|e| match rest.strip_prefix(e) {
                Some(r) => {
                    rest = r;
                    true
                }
                None => false,
            }) && rest.is_empty();
            if same {
                return env.clone();
            }
        }
        let raw: Vec<u8> = entries().flatten().copied().collect();
        let env = HostEnv::scrubbed(entries().filter_map(variable));
        *last = Some((raw, env.clone()));
        env
    }

    /// The scrub itself, on any list of variables (a later duplicate wins).
    fn scrubbed<'a>(vars: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Self {
        HostEnv(Arc::new(
            vars.into_iter()
                .filter(|(k, _)| !is_scrubbed(k))
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect(),
        ))
    }
}

/// A command's environment as `execve` takes it: `NAME=value` entries in
/// name order, one per name, each ending in NUL, in one buffer.
pub(crate) struct Envp {
    bytes: Vec<u8>,
    count: usize,
}

impl Envp {
    /// No variable at all.
    #[cfg(test)]
    pub(crate) fn empty() -> Envp {
        Envp {
            bytes: Vec::new(),
            count: 0,
        }
    }

    /// Every entry, each with its NUL, back to back.
    pub(crate) fn as_bytes_with_nuls(&self) -> &[u8] {
        &self.bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The entries, without their NULs.
    pub(crate) fn entries(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes.split(|&b| b == 0).take(self.count)
    }

    /// The value of `name`, if set.
    pub(crate) fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.entries()
            .find_map(|e| e.strip_prefix(name)?.strip_prefix(b"="))
    }
}

/// Builds `envp` for a command: scrubbed host env, forced terminal
/// settings, the caller's `env`, the caller's `dsh_env`, and last the
/// executor's own tag (later wins).
pub(crate) fn child_environment(host: HostEnv, spec: &Spec, tag: &str) -> Envp {
    build(
        host,
        layered(&FORCED, spec.env.as_ref(), spec.dsh_env.as_ref()),
        tag,
    )
}

/// What a terminal session forces instead: the same, except that it is a
/// terminal (`TERM=xterm-256color`, which the caller's `env` may change).
const TERMINAL_FORCED: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "xterm-256color"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// [`child_environment`] for a terminal session (docs/terminals.md): the
/// same layers and rules, with [`TERMINAL_FORCED`].
pub(crate) fn terminal_environment(
    host: HostEnv,
    env: Option<&BTreeMap<String, String>>,
    dsh_env: Option<&BTreeMap<String, String>>,
    tag: &str,
) -> Envp {
    build(host, layered(&TERMINAL_FORCED, env, dsh_env), tag)
}

/// [`child_environment`] for a spawn (docs/spawn.md): the scrubbed host
/// environment with the spec's changes (`None` removes a variable), and
/// nothing forced: a program is not a command.
pub(crate) fn spawn_environment(host: HostEnv, env: &BTreeMap<String, Option<String>>, tag: &str) -> Envp {
    let layers = env
        .iter()
        .map(|(k, v)| (k.as_bytes(), v.as_ref().map(String::as_bytes)))
        .collect();
    build(host, layers, tag)
}

/// Changes to the host environment, by name: a value, or `None` to remove it.
type Layers<'a> = BTreeMap<&'a [u8], Option<&'a [u8]>>;

/// The forced variables, then `env`, then `dsh_env` (later wins).
fn layered<'a>(
    forced: &'a [(&'a str, &'a str)],
    env: Option<&'a BTreeMap<String, String>>,
    dsh_env: Option<&'a BTreeMap<String, String>>,
) -> Layers<'a> {
    forced
        .iter()
        .map(|(k, v)| (k.as_bytes(), Some(v.as_bytes())))
        .chain(
            env.into_iter()
                .flatten()
                .chain(dsh_env.into_iter().flatten())
                .map(|(k, v)| (k.as_bytes(), Some(v.as_bytes()))),
        )
        .collect()
}

/// Where the environment says sshd started the host (SSH_CLIENT or
/// SSH2_CLIENT) and no shell level is set, bash takes itself for the shell
/// sshd starts and reads ~/.bashrc before every `bash -c`: the user's
/// set-up, its output and its cost in every command. A shell level of 1
/// (the host's) says it is not that shell. A caller's own SHLVL stands.
fn not_the_shell_sshd_starts<'a>(host: &HostEnv, layers: &mut Layers<'a>) {
    let final_value = |name: &[u8]| -> Option<Vec<u8>> {
        match layers.get(name) {
            Some(v) => v.map(<[u8]>::to_vec),
            None => host
                .0
                .iter()
                .find(|(k, _)| k.as_slice() == name)
                .map(|(_, v)| v.clone()),
        }
    };
    let sshd = final_value(b"SSH_CLIENT").is_some() || final_value(b"SSH2_CLIENT").is_some();
    let level = final_value(b"SHLVL").and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse::<i64>().ok());
    if sshd && !layers.contains_key(b"SHLVL".as_slice()) && level.is_none_or(|l| l < 1) {
        layers.insert(b"SHLVL", Some(b"1"));
    }
}

/// The scrubbed host environment with `layers` over it, and last the
/// executor's own tag.
fn build<'a>(host: HostEnv, mut layers: Layers<'a>, tag: &'a str) -> Envp {
    not_the_shell_sshd_starts(&host, &mut layers);
    layers.insert(EXEC_TAG_VAR.as_bytes(), Some(tag.as_bytes()));
    // Both are in name order: merge them, the layers winning a tie.
    let mut host_vars = host
        .0
        .iter()
        .map(|(k, v)| (k.as_slice(), Some(v.as_slice())))
        .peekable();
    let mut layer_vars = layers.into_iter().peekable();
    let mut envp = Envp {
        bytes: Vec::with_capacity(4096),
        count: 0,
    };
    loop {
        let (k, v) = match (host_vars.peek(), layer_vars.peek()) {
            (None, None) => break,
            (Some(_), None) => host_vars.next(),
            (None, Some(_)) => layer_vars.next(),
            (Some(h), Some(l)) => match h.0.cmp(l.0) {
                std::cmp::Ordering::Less => host_vars.next(),
                std::cmp::Ordering::Greater => layer_vars.next(),
                std::cmp::Ordering::Equal => {
                    host_vars.next();
                    layer_vars.next()
                }
            },
        }
        .expect("peeked");
        let Some(v) = v else {
            continue; // removed by the spec
        };
        // Parent entries cannot hold NUL; spec entries were checked by
        // resolve/check. Dropping rather than panicking keeps this total
        // (and the entries NUL-separated).
        if k.contains(&0) || v.contains(&0) {
            continue;
        }
        envp.bytes.extend_from_slice(k);
        envp.bytes.push(b'=');
        envp.bytes.extend_from_slice(v);
        envp.bytes.push(0);
        envp.count += 1;
    }
    envp
}

/// The PATH a command will see, for finding its shell the way `execvp` in
/// the child would.
pub(crate) fn path_of(envp: &Envp) -> Option<&[u8]> {
    envp.get(b"PATH")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(env: &[(&str, &str)], dsh_env: &[(&str, &str)]) -> Spec {
        let map = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
        };
        Spec {
            command: "true".into(),
            workdir: "/".into(),
            timeout_ms: 1,
            stdout_max_bytes: 1,
            stdin: None,
            stdin_pipe: false,
            on_expiry: crate::OnExpiry::Kill,
            env: map(env),
            dsh_env: map(dsh_env),
            owner: None,
            sandbox_policy: None,
            limits: Default::default(),
        }
    }

    fn host(pairs: &[(&[u8], &[u8])]) -> HostEnv {
        HostEnv::scrubbed(pairs.iter().copied())
    }

    /// A host's environment with what a command must not see (secrets, a
    /// stale tag), what it must see byte for byte (a name and a value that
    /// are not UTF-8), and what is forced for it (the terminal settings),
    /// made into a command's environment tagged `tag`.
    fn typical_command_env(tag: &str) -> Envp {
        let h = host(&[
            (b"PLAIN", b"kept"),
            (b"LANG_\xff", b"value \xfe"),
            (b"GITHUB_TOKEN", b"leak"),
            (b"DSH_STALE", b"leak"),
            (b"TERM", b"xterm-256color"),
            (b"PAGER", b"less"),
            (b"GIT_PAGER", b"delta"),
            (b"NO_COLOR", b"0"),
        ]);
        child_environment(h, &spec(&[], &[]), tag)
    }

    /// `envp` as (name, value) pairs, in order.
    fn pairs(envp: &Envp) -> Vec<(Vec<u8>, Vec<u8>)> {
        envp.entries()
            .map(|b| {
                let eq = b.iter().position(|&c| c == b'=').expect("NAME=VALUE");
                (b[..eq].to_vec(), b[eq + 1..].to_vec())
            })
            .collect()
    }

    fn get<'a>(envp: &'a Envp, name: &str) -> Option<&'a [u8]> {
        envp.get(name.as_bytes())
    }

    #[test]
    fn credential_like_and_managed_names_are_scrubbed_case_insensitively() {
        // Each name, and whether a command must not see it.
        for (name, scrubbed) in [
            (&b"MY_API_KEY"[..], true),
            (b"api_key", true),
            (b"KEYRING_BACKEND", true),
            (b"db_password", true),
            (b"Password", true),
            (b"GITHUB_TOKEN", true),
            (b"token", true),
            (b"aws_secret_access_key", true),
            (b"Client_Secret", true),
            (b"DSH_", true),
            (b"DSH_EXEC_TAG", true),
            (b"dsh_lower", true),
            (b"\xffKEY\xfe", true),
            (b"PATH", false),
            (b"HOME", false),
            (b"TERM", false),
            (b"SSH_AUTH_SOCK", false),
            (b"PASS", false),
            (b"TOKE", false),
            (b"KE_Y", false),
            (b"XDSH_Y", false),
            (b"DSH", false),
            (b"\xff", false),
            (b"", false),
        ] {
            assert_eq!(
                is_scrubbed(name),
                scrubbed,
                "{:?} must be {}",
                String::from_utf8_lossy(name),
                if scrubbed { "scrubbed" } else { "kept" }
            );
        }
    }

    #[test]
    fn the_host_environment_is_scrubbed_and_kept_byte_for_byte() {
        let envp = typical_command_env("tag-1");
        let names: Vec<Vec<u8>> = pairs(&envp).into_iter().map(|(k, _)| k).collect();
        assert!(!names.iter().any(|k| k == b"GITHUB_TOKEN" || k == b"DSH_STALE"));
        assert_eq!(get(&envp, "PLAIN"), Some(&b"kept"[..]));
        assert!(pairs(&envp).contains(&(b"LANG_\xff".to_vec(), b"value \xfe".to_vec())));
    }

    #[test]
    fn forced_terminal_settings_override_the_host_and_the_tag_is_set() {
        let envp = typical_command_env("tag-2");
        for (name, value) in [
            ("NO_COLOR", "1"),
            ("TERM", "dumb"),
            ("PAGER", "cat"),
            ("GIT_PAGER", "cat"),
            (EXEC_TAG_VAR, "tag-2"),
        ] {
            assert_eq!(get(&envp, name), Some(value.as_bytes()), "{name}");
        }
    }

    #[test]
    fn later_layers_win_env_over_forced_dsh_env_over_env_and_the_tag_over_all() {
        let h = host(&[(b"SHARED", b"host"), (b"HOME", b"/home/host")]);
        let s = spec(
            &[
                ("SHARED", "env"),
                ("PAGER", "less"),
                ("GITHUB_TOKEN", "explicit"),
                ("DSH_MANAGED", "from-env"),
                (EXEC_TAG_VAR, "forged-by-env"),
            ],
            &[
                ("DSH_MANAGED", "from-dsh-env"),
                (EXEC_TAG_VAR, "forged-by-dsh-env"),
            ],
        );
        let envp = child_environment(h, &s, "real-tag");
        let expected: [(&str, &str, &str); 7] = [
            ("SHARED", "env", "env over the host"),
            ("HOME", "/home/host", "the host where nothing overrides"),
            ("PAGER", "less", "env over forced settings"),
            ("TERM", "dumb", "a forced setting the caller left alone"),
            (
                "GITHUB_TOKEN",
                "explicit",
                "the scrub applies to the host only, never to what the caller passes",
            ),
            ("DSH_MANAGED", "from-dsh-env", "dsh_env over env"),
            (
                EXEC_TAG_VAR,
                "real-tag",
                "the executor's tag cannot be forged: kills find processes by it",
            ),
        ];
        for (name, value, why) in expected {
            assert_eq!(get(&envp, name), Some(value.as_bytes()), "{name}: {why}");
        }
    }

    #[test]
    fn one_entry_per_name_sorted_and_nothing_that_could_not_be_passed() {
        // Not from a real environment (which cannot hold NUL): dropped, not a panic.
        let h = host(&[(b"B", b"1"), (b"A", b"2"), (b"BROKEN", b"a\0b")]);
        let envp = child_environment(h, &spec(&[("B", "3"), ("TERM", "vt100")], &[]), "t");
        let names: Vec<Vec<u8>> = pairs(&envp).into_iter().map(|(k, _)| k).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted, "sorted by name, each name once");
        assert_eq!(get(&envp, "B"), Some(&b"3"[..]));
        assert_eq!(get(&envp, "TERM"), Some(&b"vt100"[..]));
        assert_eq!(get(&envp, "BROKEN"), None);
        assert_eq!(envp.len(), names.len(), "the count sent with the entries");
    }

    #[test]
    fn environ_entries_are_read_as_std_reads_them() {
        assert_eq!(variable(b"A=1\0"), Some((&b"A"[..], &b"1"[..])));
        assert_eq!(variable(b"A=b=c\0"), Some((&b"A"[..], &b"b=c"[..])));
        assert_eq!(variable(b"A=\0"), Some((&b"A"[..], &b""[..])));
        assert_eq!(
            variable(b"=C:=x\0"),
            Some((&b"=C:"[..], &b"x"[..])),
            "a name may start with ="
        );
        assert_eq!(variable(b"NOVALUE\0"), None);
        assert_eq!(variable(b"=\0"), None);
        assert_eq!(variable(b"\0"), None);
    }

    #[test]
    fn path_of_finds_the_commands_own_path() {
        let h = host(&[(b"PATH", b"/usr/bin:/bin"), (b"MYPATH", b"/nope")]);
        let envp = child_environment(h, &spec(&[], &[]), "t");
        assert_eq!(path_of(&envp), Some(&b"/usr/bin:/bin"[..]));
        let envp = child_environment(
            host(&[(b"PATH", b"/usr/bin")]),
            &spec(&[("PATH", "/opt/bin")], &[]),
            "t",
        );
        assert_eq!(
            path_of(&envp),
            Some(&b"/opt/bin"[..]),
            "the caller's PATH, not the host's"
        );
        assert_eq!(path_of(&child_environment(host(&[]), &spec(&[], &[]), "t")), None);
    }
}
