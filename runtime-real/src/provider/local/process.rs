//! The process facts the local provider needs: is a pid alive and really
//! our node, signal its process group, wait for it to exit.
//!
//! Liveness is read from `/proc` and checked against the node's command line,
//! so a pid the kernel reused for something else is never signalled.

use rustix::process::{Pid, PidfdFlags, Signal};
use std::io;
use std::path::Path;
use std::time::Duration;

/// How long a SIGKILLed process may take to be gone (it cannot refuse; this
/// bounds a process stuck in the kernel).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// True when `pid` runs (not a zombie) and its command line is a
/// `local-node` serving `dir`.
pub fn is_our_node(pid: u32, dir: &Path) -> bool {
    if !is_running(pid) {
        return false;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let dir = dir.as_os_str().as_encoded_bytes();
    args.iter().any(|a| *a == b"local-node") && args.contains(&dir)
}

/// True when `pid` exists and has not exited (a zombie has exited).
pub fn is_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may
    // itself contain spaces or parentheses: read after the last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z') | Some('X'))
}

fn pid_of(pid: u32) -> io::Result<Pid> {
    i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("bad pid {pid}")))
}

/// Sends `signal` to the process group led by `pid`; a group that is
/// already gone is not an error.
pub fn signal_group(pid: u32, signal: Signal) -> io::Result<()> {
    match rustix::process::kill_process_group(pid_of(pid)?, signal) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Waits until `pid` has exited, at most `bound`; true when it did. Uses a
/// pidfd, so it works for processes that are not our children (after a
/// crash of `drover up`, `drover down` kills nodes it never spawned). The
/// pidfd turns readable when the process exits: `poll(2)` sleeps until that
/// event (or the bound), on the blocking pool so the runtime's threads stay
/// free; nothing is polled on a timer.
pub async fn wait_exit(pid: u32, bound: Duration) -> io::Result<bool> {
    let fd = match rustix::process::pidfd_open(pid_of(pid)?, PidfdFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return Ok(true),
        Err(e) => return Err(e.into()),
    };
    if !is_running(pid) {
        return Ok(true);
    }
    let millis = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
    let polled = tokio::task::spawn_blocking(move || {
        let timeout = rustix::event::Timespec {
            tv_sec: millis / 1000,
            tv_nsec: (millis % 1000) * 1_000_000,
        };
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        loop {
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Err(rustix::io::Errno::INTR) => continue,
                other => return other,
            }
        }
    })
    .await
    .map_err(io::Error::other)??;
    Ok(polled > 0 || !is_running(pid))
}

/// Stops the node's whole process group: SIGTERM, a bounded wait for the
/// leader, then SIGKILL for whatever is left of the group (agents started
/// with `nohup ... &` stay in the node's group and go with it).
pub async fn stop_group(pid: u32, grace: Duration) -> io::Result<()> {
    signal_group(pid, Signal::TERM)?;
    wait_exit(pid, grace).await?;
    // Whatever of the group survived SIGTERM (or ignored it) goes now, and
    // is waited for: a caller that destroyed a lease may check at once that
    // nothing of it runs.
    let members = group_members(pid, None)?;
    signal_group(pid, Signal::KILL)?;
    for member in members {
        wait_exit(member, KILL_WAIT).await?;
    }
    Ok(())
}

/// Running members of process group `pgid`; with `inside`, only those whose
/// working directory is that folder or below it.
pub fn group_members(pgid: u32, inside: Option<&Path>) -> io::Result<Vec<u32>> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let running = !matches!(fields.first(), None | Some(&"Z") | Some(&"X"));
        if !running || fields.get(2).and_then(|g| g.parse::<u32>().ok()) != Some(pgid) {
            continue;
        }
        let in_dir = inside.is_none_or(|dir| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        });
        if in_dir {
            members.push(pid);
        }
    }
    Ok(members)
}

/// Kills, one by one, the members of process group `pgid` that run inside
/// `dir` (their working directory is the node's folder or below it), and
/// waits for them. Used when the node's leader is already gone: the group
/// id may since belong to someone else, the folder cannot.
pub async fn sweep_group(pgid: u32, dir: &Path) -> io::Result<u32> {
    let members = group_members(pgid, Some(dir))?;
    for &member in &members {
        match rustix::process::kill_process(pid_of(member)?, Signal::KILL) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for &member in &members {
        wait_exit(member, KILL_WAIT).await?;
    }
    Ok(members.len() as u32)
}
