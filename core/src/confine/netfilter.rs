//! `network: loopback` (docs/sandbox.md, "Network"): the address check
//! neither Landlock (ports only) nor seccomp (it cannot read the address a
//! pointer points at) can make, made by the kernel's cgroup BPF hooks on a
//! cgroup v2 group of the command's own:
//!
//! - `connect`, `bind` and UDP `sendmsg` (IPv4 and IPv6) see the address
//!   the kernel has already copied from the caller, so a thread rewriting it
//!   afterwards changes nothing: anything but 127.0.0.0/8, `::1` and
//!   `::ffff:127.0.0.0/104` fails with EPERM;
//! - every IP packet a socket of the command sends or receives, whatever
//!   made it (raw sockets, ICMP, a listener that bound the wildcard by
//!   `listen` alone), is dropped unless both its source and its destination
//!   are loopback addresses.
//!
//! The programs are a few instructions each, loaded once per process and
//! attached to each command's group before the command enters it (before
//! exec). Loading them needs CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN),
//! and a writable cgroup v2 hierarchy: without either, `loopback` is
//! unavailable and fails closed.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::OnceLock;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;

const PROG_CGROUP_SKB: u32 = 8;
const PROG_CGROUP_SOCK_ADDR: u32 = 18;

const INET_INGRESS: u32 = 0;
const INET_EGRESS: u32 = 1;
const INET4_BIND: u32 = 8;
const INET6_BIND: u32 = 9;
const INET4_CONNECT: u32 = 10;
const INET6_CONNECT: u32 = 11;
const UDP4_SENDMSG: u32 = 14;
const UDP6_SENDMSG: u32 = 15;

const HELPER_SKB_LOAD_BYTES: i32 = 26;

/// One BPF instruction (`struct bpf_insn`).
#[derive(Clone, Copy)]
#[repr(C)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

// The few instruction forms the programs use.
/// `dst = *(u32 *)(src + off)`
fn ldxw(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x61, dst, src, off, 0)
}
/// `dst = imm` (64-bit)
fn mov(dst: u8, imm: i32) -> Insn {
    insn(0xb7, dst, 0, 0, imm)
}
/// `dst = src` (64-bit)
fn movx(dst: u8, src: u8) -> Insn {
    insn(0xbf, dst, src, 0, 0)
}
/// `dst += imm` (64-bit)
fn add(dst: u8, imm: i32) -> Insn {
    insn(0x07, dst, 0, 0, imm)
}
/// `w_dst &= imm` (32-bit)
fn and32(dst: u8, imm: u32) -> Insn {
    insn(0x54, dst, 0, 0, imm as i32)
}
/// `if w_dst != imm goto +off` (32-bit compare)
fn jne32(dst: u8, imm: u32, off: i16) -> Insn {
    insn(0x56, dst, 0, off, imm as i32)
}
/// `if w_dst == imm goto +off` (32-bit compare)
fn jeq32(dst: u8, imm: u32, off: i16) -> Insn {
    insn(0x16, dst, 0, off, imm as i32)
}
/// `if dst != imm goto +off` (64-bit compare)
fn jne(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x55, dst, 0, off, imm)
}
/// `goto +off`
fn ja(off: i16) -> Insn {
    insn(0x05, 0, 0, off, 0)
}
fn call(helper: i32) -> Insn {
    insn(0x85, 0, 0, 0, helper)
}
fn exit() -> Insn {
    insn(0x95, 0, 0, 0, 0)
}

/// A word of an address as the kernel stores it (network order), read as a
/// native u32.
fn word(bytes: [u8; 4]) -> u32 {
    u32::from_ne_bytes(bytes)
}
/// The mask and value of "the first octet is 127".
fn first_octet() -> (u32, u32) {
    (word([0xff, 0, 0, 0]), word([127, 0, 0, 0]))
}

/// A check of the IPv6 address at `r_base + off`, as four words: `::1`, or
/// `::ffff:127.x.x.x` when `mapped`. Jumps `fail` instructions after its
/// own end on a mismatch; falls through on a match.
fn check_ip6(
    base: u8,
    off: i16,
    mapped: bool,
    out: &mut Vec<Insn>,
    deny_label: usize,
) -> Vec<(usize, usize)> {
    // Returns the (instruction index, target label) pairs to patch.
    let mut patches = Vec::new();
    let (mask, v127) = first_octet();
    out.push(ldxw(2, base, off));
    patches.push((out.len(), deny_label));
    out.push(jne32(2, 0, 0));
    out.push(ldxw(2, base, off + 4));
    patches.push((out.len(), deny_label));
    out.push(jne32(2, 0, 0));
    out.push(ldxw(2, base, off + 8));
    if mapped {
        // ::ffff:127.0.0.0/104 — word 2 is 0000ffff.
        // if w2 == 0 -> the ::1 check; else it must be ::ffff: and 127.
        let jump_at = out.len();
        out.push(jeq32(2, 0, 0)); // patched below to the ::1 check
        patches.push((out.len(), deny_label));
        out.push(jne32(2, word([0, 0, 0xff, 0xff]), 0));
        out.push(ldxw(2, base, off + 12));
        out.push(and32(2, mask));
        patches.push((out.len(), deny_label));
        out.push(jne32(2, v127, 0));
        let done_at = out.len();
        out.push(ja(0)); // patched to the end of this check
        let one_check = out.len();
        out[jump_at].off = (one_check - jump_at - 1) as i16;
        out.push(ldxw(2, base, off + 12));
        patches.push((out.len(), deny_label));
        out.push(jne32(2, word([0, 0, 0, 1]), 0));
        let end = out.len();
        out[done_at].off = (end - done_at - 1) as i16;
    } else {
        patches.push((out.len(), deny_label));
        out.push(jne32(2, 0, 0));
        out.push(ldxw(2, base, off + 12));
        patches.push((out.len(), deny_label));
        out.push(jne32(2, word([0, 0, 0, 1]), 0));
    }
    patches
}

/// Resolves `patches` (instruction index → the index of the deny label).
fn patch(out: &mut [Insn], patches: &[(usize, usize)], target: usize) {
    for &(at, _) in patches {
        out[at].off = (target - at - 1) as i16;
    }
}

/// `connect4`/`bind4`/`sendmsg4`: allow 127.0.0.0/8 (`user_ip4`, offset 4).
fn sock_addr4() -> Vec<Insn> {
    let (mask, v127) = first_octet();
    vec![
        ldxw(2, 1, 4),
        and32(2, mask),
        jne32(2, v127, 2),
        mov(0, 1),
        exit(),
        mov(0, 0),
        exit(),
    ]
}

/// Ends a program: falling through here passes (returns 1); every jump in
/// `patches` goes to the denial (returns 0) after it.
fn pass_else_deny(mut p: Vec<Insn>, patches: &[(usize, usize)]) -> Vec<Insn> {
    p.push(mov(0, 1));
    p.push(exit());
    let deny = p.len();
    p.push(mov(0, 0));
    p.push(exit());
    patch(&mut p, patches, deny);
    p
}

/// `connect6`/`bind6`/`sendmsg6`: allow `::1` and `::ffff:127.0.0.0/104`
/// (`user_ip6`, offset 8).
fn sock_addr6() -> Vec<Insn> {
    let mut p = Vec::new();
    let patches = check_ip6(1, 8, true, &mut p, 0);
    pass_else_deny(p, &patches)
}

/// Ingress and egress packets: pass only IPv4 with both addresses in
/// 127.0.0.0/8 and IPv6 with both `::1`; the IP header is copied to the
/// stack with `bpf_skb_load_bytes` (the packet starts at it here).
fn skb() -> Vec<Insn> {
    let (mask, v127) = first_octet();
    let ip = u32::from(u16::from_ne_bytes([0x08, 0x00]));
    let ip6 = u32::from(u16::from_ne_bytes([0x86, 0xdd]));
    let mut p = Vec::new();
    let mut patches = Vec::new();
    p.push(movx(6, 1));
    p.push(ldxw(2, 6, 16)); // __sk_buff.protocol
    let to_v6 = p.len();
    p.push(jeq32(2, ip6, 0));
    patches.push((p.len(), 0));
    p.push(jne32(2, ip, 0));
    // IPv4: source and destination, 8 bytes at offset 12, to fp-8.
    patches.push(load_header_bytes(&mut p, 12, 8));
    for off in [-8i16, -4] {
        p.push(ldxw(2, 10, off));
        p.push(and32(2, mask));
        patches.push((p.len(), 0));
        p.push(jne32(2, v127, 0));
    }
    let v4_pass = p.len();
    p.push(ja(0)); // to pass
                   // IPv6: source and destination, 32 bytes at offset 8, to fp-32.
    let v6 = p.len();
    p[to_v6].off = (v6 - to_v6 - 1) as i16;
    patches.push(load_header_bytes(&mut p, 8, 32));
    patches.extend(check_ip6(10, -32, false, &mut p, 0));
    patches.extend(check_ip6(10, -16, false, &mut p, 0));
    let pass = p.len();
    p[v4_pass].off = (pass - v4_pass - 1) as i16;
    pass_else_deny(p, &patches)
}

/// Copies `len` bytes at `offset` of the packet (the skb is in r6) to
/// fp-`len`; returns the patch of the jump taken when the copy fails.
fn load_header_bytes(p: &mut Vec<Insn>, offset: i32, len: i32) -> (usize, usize) {
    p.push(movx(1, 6));
    p.push(mov(2, offset));
    p.push(movx(3, 10));
    p.push(add(3, -len));
    p.push(mov(4, len));
    p.push(call(HELPER_SKB_LOAD_BYTES));
    let fail = (p.len(), 0);
    p.push(jne(0, 0, 0));
    fail
}

fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a zero-initialised `union bpf_attr` of 128 bytes
    // (larger than every field used; the kernel requires the rest zero),
    // live for the call; the kernel reads it, and writes only into the
    // log buffer it may point at, which the caller keeps alive.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn put32(attr: &mut [u8; 128], at: usize, v: u32) {
    attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}
fn put64(attr: &mut [u8; 128], at: usize, v: u64) {
    attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// Loads one program; the error carries the verifier's log.
fn load(kind: u32, expected_attach: u32, insns: &[Insn]) -> Result<OwnedFd, String> {
    let license = c"Dual MIT/GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut attr = [0u8; 128];
    put32(&mut attr, 0, kind);
    put32(&mut attr, 4, insns.len() as u32);
    put64(&mut attr, 8, insns.as_ptr() as u64);
    put64(&mut attr, 16, license.as_ptr() as u64);
    put32(&mut attr, 24, 1); // log_level
    put32(&mut attr, 28, log.len() as u32);
    put64(&mut attr, 32, log.as_mut_ptr() as u64);
    put32(&mut attr, 68, expected_attach);
    match bpf(BPF_PROG_LOAD, &mut attr) {
        // SAFETY: BPF_PROG_LOAD returned a new descriptor, ours alone
        // (the kernel makes it close-on-exec).
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            Err(format!(
                "cannot load its BPF program: {e}{}",
                if last.is_empty() {
                    String::new()
                } else {
                    format!(" ({last})")
                }
            ))
        }
    }
}

/// The loaded programs and the hook each attaches to.
struct Programs {
    hooks: Vec<(OwnedFd, u32)>,
}

fn programs() -> &'static Result<Programs, String> {
    static P: OnceLock<Result<Programs, String>> = OnceLock::new();
    P.get_or_init(|| {
        let mut hooks = Vec::new();
        for attach in [INET4_BIND, INET4_CONNECT, UDP4_SENDMSG] {
            hooks.push((load(PROG_CGROUP_SOCK_ADDR, attach, &sock_addr4())?, attach));
        }
        for attach in [INET6_BIND, INET6_CONNECT, UDP6_SENDMSG] {
            hooks.push((load(PROG_CGROUP_SOCK_ADDR, attach, &sock_addr6())?, attach));
        }
        for attach in [INET_INGRESS, INET_EGRESS] {
            hooks.push((load(PROG_CGROUP_SKB, attach, &skb())?, attach));
        }
        Ok(Programs { hooks })
    })
}

/// Whether `loopback` can be enforced here, or why not.
pub(crate) fn available() -> Result<(), String> {
    crate::confine::unified::own_group()?;
    programs().as_ref().map(|_| ()).map_err(Clone::clone)
}

/// Attaches every program to the cgroup v2 group `dir` (made by the
/// caller, who removes it on an error).
pub(crate) fn attach(dir: &Path) -> Result<(), String> {
    let programs = programs().as_ref().map_err(Clone::clone)?;
    // O_DIRECTORY: the group is attached to, its contents are not read.
    let group = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
        .map(OwnedFd::from)
        .map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    for (prog, hook) in &programs.hooks {
        let mut attr = [0u8; 128];
        put32(&mut attr, 0, group.as_raw_fd() as u32);
        put32(&mut attr, 4, prog.as_raw_fd() as u32);
        put32(&mut attr, 8, *hook);
        bpf(BPF_PROG_ATTACH, &mut attr).map_err(|e| format!("cannot attach its BPF program: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_the_program() {
        for p in [sock_addr4(), sock_addr6(), skb()] {
            for (i, ins) in p.iter().enumerate() {
                let class = ins.code & 0x07;
                if (class == 0x05 || class == 0x06) && ins.code != 0x85 && ins.code != 0x95 {
                    let to = i as i64 + 1 + ins.off as i64;
                    assert!(
                        to > i as i64 && (to as usize) < p.len(),
                        "jump at {i} to {to} of {}",
                        p.len()
                    );
                }
            }
            assert_eq!(p.last().unwrap().code, 0x95, "ends with exit");
        }
    }
}
