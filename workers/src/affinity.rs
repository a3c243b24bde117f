//! Which processors a thread may run on (Linux's `sched_setaffinity`).
//!
//! A pipeline step passes from a node's agent to its worker's serving
//! thread and back. When the two run on different processors, each hand-off
//! wakes a processor that may be idle, which is slow on a VM whose idle
//! vCPUs halt. So an agent keeps its thread and its worker's serving thread
//! on one processor (`drover-worker stage --serve-cpu`), and leaves the
//! worker's other threads free to run on any processor.

use std::io;

/// The processors the calling thread may run on, in ascending order.
pub fn allowed() -> io::Result<Vec<usize>> {
    imp::allowed_of(0)
}

/// The processors thread `tid` (a system-wide thread id: a process's
/// first thread has its process id) may run on, in ascending order.
pub fn allowed_of(tid: u32) -> io::Result<Vec<usize>> {
    match i32::try_from(tid) {
        Ok(0) | Err(_) => Err(io::Error::from(io::ErrorKind::InvalidInput)),
        Ok(tid) => imp::allowed_of(tid),
    }
}

/// Lets the calling thread run only on `cpus`. Neither allocates nor
/// locks, so it may run between `fork` and `exec`.
pub fn restrict(cpus: &[usize]) -> io::Result<()> {
    imp::restrict(cpus)
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // the two system calls and their C set
mod imp {
    use std::io;

    /// The most processors a `cpu_set_t` holds.
    const SET_SIZE: usize = 8 * std::mem::size_of::<libc::cpu_set_t>();

    /// `tid` 0: the calling thread.
    pub fn allowed_of(tid: libc::pid_t) -> io::Result<Vec<usize>> {
        // SAFETY: an all-zero cpu_set_t is a valid, empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: the size is the set's own; a thread id that names no
        // thread is an error, not undefined behaviour.
        let r = unsafe {
            libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: every index is below the set's size.
        Ok((0..SET_SIZE)
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .collect())
    }

    pub fn restrict(cpus: &[usize]) -> io::Result<()> {
        if cpus.is_empty() || cpus.iter().any(|&cpu| cpu >= SET_SIZE) {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // SAFETY: an all-zero cpu_set_t is a valid, empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &cpu in cpus {
            // SAFETY: checked above to be below the set's size.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        // SAFETY: the size is the set's own; 0 names the calling thread.
        let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;

    pub fn allowed_of(_tid: i32) -> io::Result<Vec<usize>> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    pub fn restrict(_cpus: &[usize]) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_restricted_thread_runs_where_it_was_told_and_no_other_thread_changes() {
        let all = allowed().expect("this thread's processors");
        assert!(!all.is_empty());
        let last = *all.last().expect("one processor at least");
        let pinned = std::thread::spawn(move || {
            restrict(&[last]).expect("restrict");
            allowed().expect("allowed")
        })
        .join()
        .expect("thread");
        assert_eq!(pinned, vec![last]);
        // Another thread's set, read from outside it.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            restrict(&[last]).expect("restrict");
            // SAFETY: gettid has no preconditions.
            #[allow(unsafe_code)]
            let tid = unsafe { libc::gettid() } as u32;
            tx.send(tid).expect("send");
            let _ = wait.recv();
        });
        let tid = rx.recv().expect("the thread's id");
        assert_eq!(allowed_of(tid).expect("allowed_of"), vec![last]);
        done.send(()).expect("done");
        other.join().expect("thread");
        assert_eq!(allowed_of(std::process::id()).expect("main"), all);
        assert!(allowed_of(0).is_err(), "0 names no thread here");
        assert_eq!(allowed().expect("allowed"), all, "the caller's set stays");
        let back = std::thread::spawn(move || {
            restrict(&[last]).expect("restrict");
            restrict(&all).expect("widen again");
            allowed().expect("allowed") == all
        })
        .join()
        .expect("thread");
        assert!(back, "a thread may be given its whole set back");
    }

    #[test]
    fn an_empty_or_impossible_set_is_refused() {
        let err = restrict(&[]).expect_err("empty");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        let err = restrict(&[1 << 20]).expect_err("beyond the set");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    }
}
