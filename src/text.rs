//! Small text helpers for what people read: counted nouns.

/// `counted(1, "agent")` is "1 agent", `counted(3, "agent")` is "3 agents".
pub fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::counted;

    #[test]
    fn one_is_singular_and_zero_and_many_are_plural() {
        assert_eq!(counted(0, "agent"), "0 agents");
        assert_eq!(counted(1, "agent"), "1 agent");
        assert_eq!(counted(3, "agent"), "3 agents");
    }
}
