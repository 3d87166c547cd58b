//! The `[schedules]` jobs of `phoenix run`: when the watchdog pass and the brief round are due.

use std::time::Duration;

use tracing::info;

use crate::spec::{Schedule, Spec};

/// The `[schedules]` jobs. The watchdog pass and brief generation arrive with later issues;
/// until then each run is a visible log line.
pub(super) struct Jobs {
    jobs: Vec<Job>,
    exprs: Vec<Option<String>>,
}

struct Job {
    name: &'static str,
    schedule: Schedule,
    next: Option<jiff::Timestamp>,
}

impl Jobs {
    pub(super) fn new(spec: &Spec) -> Jobs {
        let mut jobs = Vec::new();
        for (name, schedule) in [
            ("watchdog", &spec.schedules.watchdog),
            ("brief", &spec.schedules.brief),
        ] {
            if let Some(s) = schedule {
                let next = next_occurrence(s);
                if let Some(at) = next {
                    info!(job = name, schedule = %s.expr, next = %at, "scheduled");
                }
                jobs.push(Job {
                    name,
                    schedule: s.clone(),
                    next,
                });
            }
        }
        Jobs {
            jobs,
            exprs: schedule_exprs(spec),
        }
    }

    pub(super) fn reschedule_if_changed(&mut self, spec: &Spec) -> bool {
        if schedule_exprs(spec) == self.exprs {
            return false;
        }
        *self = Jobs::new(spec);
        true
    }

    pub(super) fn next_instant(&self) -> tokio::time::Instant {
        let now = jiff::Timestamp::now();
        let soonest = self.jobs.iter().filter_map(|j| j.next).min();
        let wait = soonest
            .map(|t| {
                let ms = t.as_millisecond() - now.as_millisecond();
                Duration::from_millis(ms.max(0) as u64)
            })
            .unwrap_or(Duration::from_secs(86_400));
        tokio::time::Instant::now() + wait
    }

    /// The jobs due now, rescheduled for their next time.
    pub(super) fn take_due(&mut self) -> Vec<&'static str> {
        let now = jiff::Timestamp::now();
        let mut due = Vec::new();
        for job in &mut self.jobs {
            if job.next.is_some_and(|t| t <= now) {
                info!(job = job.name, schedule = %job.schedule.expr, "scheduled run");
                due.push(job.name);
                job.next = next_occurrence(&job.schedule);
            }
        }
        due
    }
}

fn schedule_exprs(spec: &Spec) -> Vec<Option<String>> {
    [&spec.schedules.watchdog, &spec.schedules.brief]
        .iter()
        .map(|s| s.as_ref().map(|s| s.expr.clone()))
        .collect()
}

fn next_occurrence(schedule: &Schedule) -> Option<jiff::Timestamp> {
    let now = jiff::Zoned::now();
    schedule
        .cron
        .find_next_occurrence(&now, false)
        .ok()
        .map(|z| z.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_minute_schedule_is_within_a_minute() {
        let s = Schedule::parse("* * * * *").unwrap();
        let next = next_occurrence(&s).unwrap();
        let wait = next.as_second() - jiff::Timestamp::now().as_second();
        assert!((0..=60).contains(&wait), "{wait}");
    }
}
