//! The box's seccomp programs: the calls no MCP server needs and a
//! hostile one would use to leave its box or reach the gateway. A refused
//! call fails with an errno (the process goes on); nothing is killed.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
};

/// Calls refused outright (EPERM).
const REFUSED: &[libc::c_long] = &[
    // Another process's memory, or its own tracer.
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kcmp,
    // A thread by id alone (libc signals with tgkill, which is checked).
    libc::SYS_tkill,
    // Mounts and namespaces: the box is built before exec, never again.
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    // Files by handle, past every path check.
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    // The kernel's own surfaces.
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_acct,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_quotactl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// The namespace flags `clone` may not carry.
const NAMESPACES: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// The programs, in the order they are applied: the first answers `clone3`
/// with ENOSYS (its flags are in memory a filter cannot read, so libc falls
/// back to `clone`, whose flags it can); the second refuses the rest.
/// `gateway` is toolgate's pid, which no signal may reach even where
/// Landlock's scopes are missing.
pub(crate) fn programs(gateway: libc::pid_t) -> Result<Vec<BpfProgram>, String> {
    let arch: TargetArch =
        std::env::consts::ARCH.try_into().map_err(|e| format!("seccomp: {e:?}"))?;
    let build =
        |rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32| -> Result<BpfProgram, String> {
            let filter = SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(errno as u32),
                arch,
            )
            .map_err(|e| format!("seccomp: {e}"))?;
            filter.try_into().map_err(|e: seccompiler::BackendError| format!("seccomp: {e}"))
        };
    let cond = |arg: u8, len: Len, op: Op, value: u64| {
        Cond::new(arg, len, op, value).map_err(|e| format!("seccomp: {e}"))
    };
    let rule =
        |conditions: Vec<Cond>| SeccompRule::new(conditions).map_err(|e| format!("seccomp: {e}"));

    let clone3 = BTreeMap::from([(libc::SYS_clone3, vec![])]);
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|&call| (call, vec![])).collect();
    let mut clone = vec![];
    for &flag in NAMESPACES {
        clone.push(rule(vec![cond(0, Len::Qword, Op::MaskedEq(flag), flag)?])?);
    }
    refused.insert(libc::SYS_clone, clone);
    // The gateway, by pid, by its process group, and "every process we may signal".
    let pid = gateway as u32 as u64;
    let group = (-gateway) as u32 as u64;
    let every = (-1i32) as u32 as u64;
    let to_gateway = |arg| -> Result<Vec<SeccompRule>, String> {
        [pid, group, every].iter().map(|&v| rule(vec![cond(arg, Len::Dword, Op::Eq, v)?])).collect()
    };
    refused.insert(libc::SYS_kill, to_gateway(0)?);
    refused.insert(libc::SYS_tgkill, to_gateway(0)?);
    refused.insert(libc::SYS_rt_sigqueueinfo, to_gateway(0)?);
    refused.insert(libc::SYS_rt_tgsigqueueinfo, to_gateway(0)?);
    refused.insert(libc::SYS_pidfd_open, to_gateway(0)?);
    // A socket named by a path (a database's, docker.sock) or in the
    // abstract namespace: Landlock does not guard `connect`, so no
    // AF_UNIX socket is made at all (`socketpair`, which pipes to a
    // child, is another call and stays).
    refused.insert(
        libc::SYS_socket,
        vec![rule(vec![cond(0, Len::Dword, Op::Eq, libc::AF_UNIX as u64)?])?],
    );
    // Keystrokes pushed into a terminal a server could still hold.
    refused.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::TIOCSTI)?])?,
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::TIOCLINUX)?])?,
        ],
    );
    Ok(vec![build(clone3, libc::ENOSYS)?, build(refused, libc::EPERM)?])
}
