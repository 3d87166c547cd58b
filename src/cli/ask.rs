//! Asking the operator before the fleet changes, without holding its lock across the
//! question: plan, show, ask, and only then lock and plan again. A person away from the
//! terminal must not keep the daemon from reviving a killed pane, nor a `phoenix restart`
//! from running. What is applied is what the operator said yes to: a plan that changed in the
//! meantime is shown and asked again, a few times at most.

/// How many times a plan is shown and asked before apply gives up on a fleet that keeps
/// changing under the question.
pub const MAX_ASKS: usize = 3;

/// One way of asking: its plans, made without and then under the lock.
pub trait Asking {
    /// What is shown and asked about.
    type Shown;
    /// What is planned again under the lock, to compare.
    type Checked;
    type Lock;

    /// The plan as things are, no lock held.
    fn plan(&mut self) -> anyhow::Result<Self::Shown>;
    /// Show it; `again` after the plan changed while the operator was asked.
    fn show(&mut self, shown: &Self::Shown, again: bool) -> anyhow::Result<()>;
    fn is_empty(&self, shown: &Self::Shown) -> bool;
    /// The operator's answer: only a yes goes on.
    fn ask(&mut self) -> anyhow::Result<bool>;
    /// Take the lock, and plan again under it.
    fn lock_and_check(&mut self) -> anyhow::Result<(Self::Lock, Self::Checked)>;
    /// Whether the plan under the lock does what the operator said yes to.
    fn same(&self, shown: &Self::Shown, checked: &Self::Checked) -> bool;
}

/// How the asking ended.
pub enum Answer<A: Asking> {
    /// Yes, and the plan under the lock is the one asked about.
    Apply {
        lock: A::Lock,
        shown: A::Shown,
        checked: A::Checked,
    },
    /// Nothing to do (shown as such; no question asked).
    Nothing(A::Shown),
    /// Anything but yes.
    Cancelled,
    /// The plan changed under every question: nothing applied.
    KeptChanging,
}

/// Plan, show and ask with no lock held; then lock and plan again; apply only what was
/// asked about, else show the new plan and ask again, [`MAX_ASKS`] times at most.
pub fn ask_then_lock<A: Asking>(asking: &mut A) -> anyhow::Result<Answer<A>> {
    for round in 0..MAX_ASKS {
        let shown = asking.plan()?;
        asking.show(&shown, round > 0)?;
        if asking.is_empty(&shown) {
            return Ok(Answer::Nothing(shown));
        }
        if !asking.ask()? {
            return Ok(Answer::Cancelled);
        }
        let (lock, checked) = asking.lock_and_check()?;
        if asking.same(&shown, &checked) {
            return Ok(Answer::Apply {
                lock,
                shown,
                checked,
            });
        }
        // The lock goes before the next question.
        drop(lock);
    }
    Ok(Answer::KeptChanging)
}

/// Why apply gave up after [`Answer::KeptChanging`].
pub fn kept_changing() -> anyhow::Error {
    anyhow::anyhow!(
        "nothing applied: the plan changed while you were asked, {MAX_ASKS} times in a row\n  = hint: run `phoenix apply` again once the fleet settles (`phoenix apply --yes` plans under the lock and asks nothing)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Plans are numbers: what the world is when planned; the lock is a flag held while the
    /// `Held` lives, so a question asked under it is seen.
    struct Scripted {
        world: Vec<u32>,
        answers: Vec<bool>,
        held: Rc<RefCell<bool>>,
        asked_under_lock: bool,
        shown: Vec<(u32, bool)>,
        asked: usize,
    }

    struct Held(Rc<RefCell<bool>>);
    impl Drop for Held {
        fn drop(&mut self) {
            *self.0.borrow_mut() = false;
        }
    }

    impl Scripted {
        fn new(world: &[u32], answers: &[bool]) -> Scripted {
            Scripted {
                world: world.to_vec(),
                answers: answers.to_vec(),
                held: Rc::default(),
                asked_under_lock: false,
                shown: Vec::new(),
                asked: 0,
            }
        }
        fn next_world(&mut self) -> u32 {
            if self.world.len() > 1 {
                self.world.remove(0)
            } else {
                self.world[0]
            }
        }
    }

    impl Asking for Scripted {
        type Shown = u32;
        type Checked = u32;
        type Lock = Held;
        fn plan(&mut self) -> anyhow::Result<u32> {
            Ok(self.next_world())
        }
        fn show(&mut self, shown: &u32, again: bool) -> anyhow::Result<()> {
            self.shown.push((*shown, again));
            Ok(())
        }
        fn is_empty(&self, shown: &u32) -> bool {
            *shown == 0
        }
        fn ask(&mut self) -> anyhow::Result<bool> {
            self.asked_under_lock |= *self.held.borrow();
            self.asked += 1;
            Ok(self.answers.remove(0))
        }
        fn lock_and_check(&mut self) -> anyhow::Result<(Held, u32)> {
            *self.held.borrow_mut() = true;
            Ok((Held(self.held.clone()), self.next_world()))
        }
        fn same(&self, shown: &u32, checked: &u32) -> bool {
            shown == checked
        }
    }

    #[test]
    fn a_plan_unchanged_under_the_lock_is_applied_and_no_question_is_asked_under_it() {
        let mut s = Scripted::new(&[5], &[true]);
        let Answer::Apply { lock, checked, .. } = ask_then_lock(&mut s).unwrap() else {
            panic!("applied");
        };
        assert_eq!(checked, 5);
        assert!(*s.held.borrow(), "the lock is handed over");
        drop(lock);
        assert_eq!(s.shown, [(5, false)]);
        assert!(!s.asked_under_lock);
    }

    #[test]
    fn a_plan_that_changed_is_shown_and_asked_again_without_the_lock() {
        // Asked about 5; under the lock it is 6: the lock goes, 6 is shown and asked again.
        let mut s = Scripted::new(&[5, 6, 6, 6], &[true, true]);
        let Answer::Apply { checked, .. } = ask_then_lock(&mut s).unwrap() else {
            panic!("applied");
        };
        assert_eq!(checked, 6);
        assert_eq!(s.shown, [(5, false), (6, true)]);
        assert_eq!(s.asked, 2);
        assert!(!s.asked_under_lock);
    }

    #[test]
    fn a_plan_that_keeps_changing_is_given_up_on_after_a_few_questions() {
        let mut s = Scripted::new(&[1, 2, 3, 4, 5, 6, 7, 8], &[true; MAX_ASKS]);
        assert!(matches!(
            ask_then_lock(&mut s).unwrap(),
            Answer::KeptChanging
        ));
        assert_eq!(s.asked, MAX_ASKS);
        assert!(!*s.held.borrow(), "no lock is left held");
        assert!(kept_changing().to_string().contains("nothing applied"));
    }

    #[test]
    fn no_means_no_and_nothing_to_do_asks_nothing() {
        let mut s = Scripted::new(&[5], &[false]);
        assert!(matches!(ask_then_lock(&mut s).unwrap(), Answer::Cancelled));
        assert!(!*s.held.borrow());
        let mut s = Scripted::new(&[0], &[]);
        assert!(matches!(ask_then_lock(&mut s).unwrap(), Answer::Nothing(_)));
        assert_eq!(s.asked, 0);
        // A plan that became empty while asked is shown as such, and nothing applied.
        let mut s = Scripted::new(&[5, 0, 0], &[true]);
        assert!(matches!(ask_then_lock(&mut s).unwrap(), Answer::Nothing(_)));
        assert_eq!(s.shown, [(5, false), (0, true)]);
    }
}
