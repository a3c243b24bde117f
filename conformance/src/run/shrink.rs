//! Shrinks a failing run case by editing its plan (never its seed): drop
//! items (delta debugging), then fewer requests and stages, then shorter
//! delays, keeping every edit after which the case still fails.

use super::RunCase;

/// Shrinks `case` while `still_fails` holds, running it at most `budget`
/// times. Returns the smallest failing case found.
pub fn shrink_run(
    case: &RunCase,
    budget: u32,
    still_fails: &mut dyn FnMut(&RunCase) -> bool,
) -> RunCase {
    let mut best = case.clone();
    let mut runs = 0u32;
    loop {
        let before = best.clone();
        let mut chunk = best.items.len().div_ceil(2).max(1);
        loop {
            let mut start = 0;
            while start < best.items.len() && runs < budget {
                let mut candidate = best.clone();
                let end = (start + chunk).min(candidate.items.len());
                candidate.items.drain(start..end);
                runs += 1;
                if still_fails(&candidate) {
                    best = candidate;
                } else {
                    start += chunk;
                }
            }
            if chunk == 1 || runs >= budget {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
        for candidate in smaller(&best) {
            if runs >= budget {
                break;
            }
            runs += 1;
            if still_fails(&candidate) {
                best = candidate;
                break;
            }
        }
        if best == before || runs >= budget {
            return best;
        }
    }
}

/// Candidate cases one edit smaller than `case`.
fn smaller(case: &RunCase) -> Vec<RunCase> {
    let mut out = Vec::new();
    let p = &case.profile;
    if p.requests > 1 {
        let mut c = case.clone();
        c.profile.requests -= 1;
        c.items.retain(|i| {
            i.fault != super::RunFault::ClientDisconnects || i.target < c.profile.requests
        });
        out.push(c);
    }
    if p.stages > 1 {
        let mut c = case.clone();
        c.profile.stages -= 1;
        c.profile.layers = c.profile.layers.max(c.profile.stages);
        out.push(c);
    }
    if p.layers > p.stages {
        let mut c = case.clone();
        c.profile.layers = c.profile.stages;
        out.push(c);
    }
    if p.max_tokens_max > 3 {
        let mut c = case.clone();
        c.profile.max_tokens_max = 3;
        out.push(c);
    }
    for i in 0..case.items.len() {
        if case.items[i].arg > 100 {
            let mut c = case.clone();
            c.items[i].arg /= 2;
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{RunFault, RunScenario, generate_run};

    #[test]
    fn shrinks_to_the_fault_that_matters() {
        let mut case = generate_run(RunScenario::Serving, 5);
        case.items.push(crate::run::RunItem {
            fault: RunFault::TokenLate,
            target: 0,
            arg: 9_000,
        });
        let shrunk = shrink_run(&case, 1_000, &mut |c: &RunCase| {
            c.items.iter().any(|i| i.fault == RunFault::TokenLate)
        });
        assert_eq!(shrunk.items.len(), 1, "{:?}", shrunk.items);
        assert!(shrunk.items[0].arg <= 100);
        assert_eq!(shrunk.profile.stages, 1);
        assert_eq!(shrunk.profile.requests, 1);
    }
}
