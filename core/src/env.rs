//! The environment a command gets (docs/environment.md).

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use crate::request::Spec;

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
    let upper = name.to_ascii_uppercase();
    let contains = |needle: &[u8]| upper.windows(needle.len()).any(|w| w == needle);
    upper.starts_with(b"DSH_")
        || contains(b"KEY")
        || contains(b"PASSWORD")
        || contains(b"SECRET")
        || contains(b"TOKEN")
}

/// The host's environment as it was when a command was asked for, already
/// scrubbed. Taken on the calling thread, inside the call: a host mutates
/// its environment from its own threads (Python's `os.environ` under the
/// GIL, Node's `process.env` on the JS thread), never concurrently with its
/// own call into dsh, whereas reading it later from a core thread would race
/// with the host's `setenv` (which reallocates `environ` under our feet).
pub(crate) struct HostEnv(BTreeMap<Vec<u8>, Vec<u8>>);

impl HostEnv {
    pub(crate) fn capture() -> Self {
        HostEnv::scrubbed(std::env::vars_os())
    }

    /// The scrub itself, on any list of variables.
    fn scrubbed(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        HostEnv(
            vars.into_iter()
                .filter(|(k, _)| !is_scrubbed(k.as_bytes()))
                .map(|(k, v)| (k.into_vec(), v.into_vec()))
                .collect(),
        )
    }
}

/// Builds `envp` for a command: scrubbed host env, forced terminal
/// settings, the caller's `env`, the caller's `dsh_env`, and last the
/// executor's own tag (later wins).
pub(crate) fn child_environment(host: HostEnv, spec: &Spec, tag: &str) -> Vec<CString> {
    build(host, &FORCED, spec.env.as_ref(), spec.dsh_env.as_ref(), tag)
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
) -> Vec<CString> {
    build(host, &TERMINAL_FORCED, env, dsh_env, tag)
}

fn build(
    host: HostEnv,
    forced: &[(&str, &str)],
    env: Option<&BTreeMap<String, String>>,
    dsh_env: Option<&BTreeMap<String, String>>,
    tag: &str,
) -> Vec<CString> {
    let mut vars = host.0;
    let layers = forced
        .iter()
        .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
        .chain(
            env.into_iter()
                .flatten()
                .map(|(k, v)| (k.as_bytes(), v.as_bytes())),
        )
        .chain(
            dsh_env
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.as_bytes(), v.as_bytes())),
        )
        .chain(std::iter::once((EXEC_TAG_VAR.as_bytes(), tag.as_bytes())));
    for (k, v) in layers {
        vars.insert(k.to_vec(), v.to_vec());
    }
    vars.into_iter()
        .filter_map(|(mut k, v)| {
            k.push(b'=');
            k.extend_from_slice(&v);
            // Parent entries cannot hold NUL; spec entries were checked by
            // resolve/check. Dropping rather than panicking keeps this total.
            CString::new(k).ok()
        })
        .collect()
}

/// The PATH a command will see, for finding its shell the way `execvp` in
/// the child would.
pub(crate) fn path_of(envp: &[CString]) -> Option<&[u8]> {
    envp.iter().find_map(|e| e.as_bytes().strip_prefix(b"PATH="))
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
        HostEnv::scrubbed(
            pairs
                .iter()
                .map(|(k, v)| (OsString::from_vec(k.to_vec()), OsString::from_vec(v.to_vec()))),
        )
    }

    /// `envp` as (name, value) pairs, in order.
    fn pairs(envp: &[CString]) -> Vec<(Vec<u8>, Vec<u8>)> {
        envp.iter()
            .map(|e| {
                let b = e.as_bytes();
                let eq = b.iter().position(|&c| c == b'=').expect("NAME=VALUE");
                (b[..eq].to_vec(), b[eq + 1..].to_vec())
            })
            .collect()
    }

    fn get<'a>(envp: &'a [CString], name: &str) -> Option<&'a [u8]> {
        envp.iter()
            .find_map(|e| e.as_bytes().strip_prefix(name.as_bytes())?.strip_prefix(b"="))
    }

    #[test]
    fn credential_like_and_managed_names_are_scrubbed_case_insensitively() {
        for name in [
            &b"MY_API_KEY"[..],
            b"api_key",
            b"KEYRING_BACKEND",
            b"db_password",
            b"Password",
            b"GITHUB_TOKEN",
            b"token",
            b"aws_secret_access_key",
            b"Client_Secret",
            b"DSH_",
            b"DSH_EXEC_TAG",
            b"dsh_lower",
            b"\xffKEY\xfe",
        ] {
            assert!(
                is_scrubbed(name),
                "{:?} must be scrubbed",
                String::from_utf8_lossy(name)
            );
        }
        for name in [
            &b"PATH"[..],
            b"HOME",
            b"TERM",
            b"SSH_AUTH_SOCK",
            b"PASS",
            b"TOKE",
            b"KE_Y",
            b"XDSH_Y",
            b"DSH",
            b"\xff",
            b"",
        ] {
            assert!(
                !is_scrubbed(name),
                "{:?} must be kept",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn the_host_environment_is_scrubbed_and_kept_byte_for_byte() {
        let h = host(&[
            (b"PLAIN", b"kept"),
            (b"LANG_\xff", b"value \xfe"),
            (b"GITHUB_TOKEN", b"leak"),
            (b"DSH_STALE", b"leak"),
        ]);
        let envp = child_environment(h, &spec(&[], &[]), "tag-1");
        let names: Vec<Vec<u8>> = pairs(&envp).into_iter().map(|(k, _)| k).collect();
        assert!(!names.iter().any(|k| k == b"GITHUB_TOKEN" || k == b"DSH_STALE"));
        assert_eq!(get(&envp, "PLAIN"), Some(&b"kept"[..]));
        assert!(pairs(&envp).contains(&(b"LANG_\xff".to_vec(), b"value \xfe".to_vec())));
    }

    #[test]
    fn forced_terminal_settings_override_the_host_and_the_tag_is_set() {
        let h = host(&[
            (b"TERM", b"xterm-256color"),
            (b"PAGER", b"less"),
            (b"GIT_PAGER", b"delta"),
            (b"NO_COLOR", b"0"),
        ]);
        let envp = child_environment(h, &spec(&[], &[]), "tag-2");
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
        assert_eq!(get(&envp, "SHARED"), Some(&b"env"[..]), "env over the host");
        assert_eq!(
            get(&envp, "HOME"),
            Some(&b"/home/host"[..]),
            "the host where nothing overrides"
        );
        assert_eq!(
            get(&envp, "PAGER"),
            Some(&b"less"[..]),
            "env over forced settings"
        );
        assert_eq!(
            get(&envp, "TERM"),
            Some(&b"dumb"[..]),
            "a forced setting the caller left alone"
        );
        assert_eq!(
            get(&envp, "GITHUB_TOKEN"),
            Some(&b"explicit"[..]),
            "the scrub applies to the host only, never to what the caller passes"
        );
        assert_eq!(
            get(&envp, "DSH_MANAGED"),
            Some(&b"from-dsh-env"[..]),
            "dsh_env over env"
        );
        assert_eq!(
            get(&envp, EXEC_TAG_VAR),
            Some(&b"real-tag"[..]),
            "the executor's tag cannot be forged: kills find processes by it"
        );
    }

    #[test]
    fn one_entry_per_name_sorted_and_nothing_that_could_not_be_passed() {
        let mut h = host(&[(b"B", b"1"), (b"A", b"2")]);
        // Not from a real environment (which cannot hold NUL): dropped, not a panic.
        h.0.insert(b"BROKEN".to_vec(), b"a\0b".to_vec());
        let envp = child_environment(h, &spec(&[("B", "3"), ("TERM", "vt100")], &[]), "t");
        let names: Vec<Vec<u8>> = pairs(&envp).into_iter().map(|(k, _)| k).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted, "sorted by name, each name once");
        assert_eq!(get(&envp, "B"), Some(&b"3"[..]));
        assert_eq!(get(&envp, "TERM"), Some(&b"vt100"[..]));
        assert_eq!(get(&envp, "BROKEN"), None);
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
