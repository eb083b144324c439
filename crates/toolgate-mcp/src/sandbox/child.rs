//! What the child does between fork and exec to enter its box: system
//! calls on memory the gateway prepared, in an order where each step still
//! has the rights the next one needs (the seccomp program, which refuses
//! `unshare`, comes last).

use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};

use super::Limits;

/// Where the network proxy listens inside a box with an allow-list.
pub const PROXY_PORT: u16 = 3128;

/// The user namespace's id maps, written before the fork. The box's user
/// is toolgate's own uid, seen inside as itself; as root, as `nobody`
/// (65534) inside, so that exec leaves it no capability even in its own
/// namespace.
#[derive(Clone)]
pub(crate) struct IdMaps {
    uid: Vec<u8>,
    gid: Vec<u8>,
}

impl IdMaps {
    pub(crate) fn new() -> Self {
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let inside = |id: u32| if id == 0 { 65534 } else { id };
        Self {
            uid: format!("{} {uid} 1\n", inside(uid)).into_bytes(),
            gid: format!("{} {gid} 1\n", inside(gid)).into_bytes(),
        }
    }

    /// Writes the maps of the user namespace just made (an unprivileged
    /// process must deny setgroups before it may write its gid map).
    pub(crate) fn write(&self) -> io::Result<()> {
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", &self.uid)?;
        write_file(c"/proc/self/gid_map", &self.gid)
    }
}

/// What the child needs, all made before the fork.
pub(crate) struct ChildPart {
    pub(crate) maps: IdMaps,
    /// `unshare` flags: a user namespace, and a network one unless the box
    /// has the host's network.
    pub(crate) namespaces: libc::c_int,
    pub(crate) limits: Limits,
    /// RLIMIT_NPROC counts the box's processes (not as root).
    pub(crate) nproc: bool,
    /// The box's pids cgroup, which the child joins first (as root).
    pub(crate) cgroup_procs: Option<OwnedFd>,
    /// Where the proxy's listening socket goes to the gateway.
    pub(crate) proxy_sender: Option<OwnedFd>,
    pub(crate) ruleset: Option<landlock::RulesetCreated>,
    pub(crate) filters: Vec<seccompiler::BpfProgram>,
}

/// Enters the box. Runs in the forked child: no lock is taken, and what it
/// reads was made by the parent.
pub(crate) fn enter(part: &mut ChildPart) -> io::Result<()> {
    // Every descriptor the gateway was itself started with and left open
    // would pass into the box, past Landlock (which checks at open): each
    // closes at exec. Those this function still uses stay open until then.
    close_all_at_exec()?;
    if let Some(procs) = &part.cgroup_procs {
        write_fd(procs.as_raw_fd(), b"0")?;
    }
    let Limits { memory_mb, processes, open_files, cpu_seconds } = part.limits;
    limit(libc::RLIMIT_DATA, memory_mb.saturating_mul(1 << 20))?;
    limit(libc::RLIMIT_NOFILE, open_files)?;
    limit(libc::RLIMIT_CPU, cpu_seconds)?;
    limit(libc::RLIMIT_CORE, 0)?;
    // Its own session: no terminal of ours, and its own process group,
    // which the channel kills whole when it goes.
    check(unsafe { libc::setsid() })?;
    check(unsafe { libc::unshare(part.namespaces) })?;
    part.maps.write()?;
    if part.nproc {
        // After the namespace: RLIMIT_NPROC then counts the box's own.
        limit(libc::RLIMIT_NPROC, processes)?;
    }
    if part.namespaces & libc::CLONE_NEWNET != 0 {
        loopback_up()?;
    }
    if let Some(sender) = &part.proxy_sender {
        hand_over_listener(sender.as_raw_fd())?;
    }
    if let Some(ruleset) = part.ruleset.take() {
        let status =
            ruleset.restrict_self().map_err(|_| io::Error::from_raw_os_error(libc::EPERM))?;
        if status.ruleset == landlock::RulesetStatus::NotEnforced {
            return Err(io::Error::from_raw_os_error(libc::ENOSYS));
        }
    }
    for filter in &part.filters {
        seccompiler::apply_filter(filter).map_err(|_| io::Error::last_os_error())?;
    }
    Ok(())
}

/// Marks every descriptor above stderr close-on-exec: `close_range` with
/// CLOSE_RANGE_CLOEXEC (Linux 5.11), else one by one up to the limit.
fn close_all_at_exec() -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range only sets flags on our own descriptors.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) } == 0 {
        return Ok(());
    }
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct on our stack; fcntl on a closed
    // descriptor fails harmlessly.
    unsafe {
        check(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit))?;
        for fd in 3..limit.rlim_cur.min(1 << 20) as RawFd {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn limit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let rlimit = libc::rlimit { rlim_cur: value, rlim_max: value };
    // SAFETY: setrlimit reads the struct on our stack.
    check(unsafe { libc::setrlimit(resource, &rlimit) })
}

fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; the fd is closed on every path below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    check(fd)?;
    let written = write_fd(fd, bytes);
    unsafe { libc::close(fd) };
    written
}

fn write_fd(fd: RawFd, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: writes from a live slice.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// A new network namespace's loopback starts down.
fn loopback_up() -> io::Result<()> {
    // SAFETY: a socket for the ioctls, closed below; the ifreq is ours on the stack.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        check(fd)?;
        let mut request: libc::ifreq = std::mem::zeroed();
        request.ifr_name[0] = b'l' as libc::c_char;
        request.ifr_name[1] = b'o' as libc::c_char;
        let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut request);
        if rc == 0 {
            request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            rc = libc::ioctl(fd, libc::SIOCSIFFLAGS, &request);
        }
        let err = io::Error::last_os_error();
        libc::close(fd);
        if rc < 0 { Err(err) } else { Ok(()) }
    }
}

/// Listens on 127.0.0.1:PROXY_PORT in the box's network namespace and
/// sends the socket to the gateway, which serves it as the proxy: the
/// box's one door, made from inside so that the gateway needs no right
/// over the namespace.
fn hand_over_listener(sender: RawFd) -> io::Result<()> {
    // SAFETY: plain socket calls on our own stack memory; the listener is
    // closed here once sent (the gateway holds its own copy).
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        check(fd)?;
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        );
        let mut address: libc::sockaddr_in = std::mem::zeroed();
        address.sin_family = libc::AF_INET as libc::sa_family_t;
        address.sin_port = PROXY_PORT.to_be();
        address.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let bound = libc::bind(
            fd,
            (&raw const address).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        if bound < 0 || libc::listen(fd, 128) < 0 {
            let err = io::Error::last_os_error();
            libc::close(fd);
            return Err(err);
        }
        let mut byte = [b'p'];
        let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
        let mut control = Control([0; 64]);
        let mut message = one_byte_message(&mut iov, &mut control);
        message.msg_controllen = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as _;
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        libc::CMSG_DATA(header).cast::<RawFd>().write_unaligned(fd);
        let sent = libc::sendmsg(sender, &message, 0);
        let err = io::Error::last_os_error();
        libc::close(fd);
        if sent < 0 { Err(err) } else { Ok(()) }
    }
}

/// Room for one descriptor's control message, aligned as `cmsghdr` is.
#[repr(C, align(8))]
struct Control([u8; 64]);

/// A message of one byte (`iov`) with room for a descriptor (`control`),
/// all of it on the caller's stack.
fn one_byte_message(iov: &mut libc::iovec, control: &mut Control) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is a valid empty one; the pointers set
    // here outlive the message, which the caller uses at once.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = iov;
    message.msg_iovlen = 1;
    message.msg_control = control.0.as_mut_ptr().cast();
    message.msg_controllen = control.0.len() as _;
    message
}

/// The gateway's side: the listening socket the child sent, already in
/// the socket's buffer when `spawn` returns (the child sent it before exec).
pub(crate) fn receive_listener(receiver: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: recvmsg into our own stack memory; the fd it carries is ours
    // to own from here.
    unsafe {
        let mut byte = [0u8];
        let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
        let mut control = Control([0; 64]);
        let mut message = one_byte_message(&mut iov, &mut control);
        let n = libc::recvmsg(
            receiver.as_raw_fd(),
            &mut message,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        );
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let header = libc::CMSG_FIRSTHDR(&message);
        if header.is_null()
            || (*header).cmsg_level != libc::SOL_SOCKET
            || (*header).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other("the box sent no listening socket"));
        }
        let fd = libc::CMSG_DATA(header).cast::<RawFd>().read_unaligned();
        Ok(std::os::fd::FromRawFd::from_raw_fd(fd))
    }
}
