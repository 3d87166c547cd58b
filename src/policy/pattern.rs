//! A step-counting copy of Lua 5.4's pattern matcher (lstrlib.c), run before each call to
//! `string.find`, `string.match`, `string.gmatch` and `string.gsub`. Those are single calls
//! into C: the instruction hook never fires inside them, and a pattern such as `.-.-.-b`
//! backtracks for hours. The copy does the same search without building any result and
//! counts its steps against the call's budget; only when it finishes in budget does the real
//! function run (same work again, exact Lua semantics and error messages). Wherever Lua
//! would raise an error (a malformed pattern, too many captures) the copy stops and lets the
//! real function raise it.

/// Why a dry run stopped early.
#[derive(Debug, PartialEq, Eq)]
pub enum Halt {
    /// Lua raises an error at this point: the real call will, at once.
    LuaError,
    /// `charge` refused more steps.
    Budget,
}

/// Steps counted between two calls to `charge`.
const CHARGE_EVERY: u64 = 4096;
/// lstrlib.c: `MAXCCALLS`, `LUA_MAXCAPTURES`.
const MAX_DEPTH: u32 = 200;
const MAX_CAPTURES: usize = 32;
const CAP_UNFINISHED: isize = -1;
const CAP_POSITION: isize = -2;
const SPECIALS: &[u8] = b"^$*+?.([%-";

/// The matcher's state for one subject and pattern (lstrlib.c `MatchState`).
struct Matcher<'a, 'c> {
    src: &'a [u8],
    pat: &'a [u8],
    depth: u32,
    level: usize,
    capture: [(usize, isize); MAX_CAPTURES],
    steps: u64,
    charge: &'c mut dyn FnMut(u64) -> bool,
}

type Step<T> = Result<T, Halt>;

impl Matcher<'_, '_> {
    /// Count one step; every `CHARGE_EVERY` steps ask the budget.
    fn step(&mut self, n: u64) -> Step<()> {
        self.steps += n;
        if self.steps >= CHARGE_EVERY {
            let steps = std::mem::take(&mut self.steps);
            if !(self.charge)(steps) {
                return Err(Halt::Budget);
            }
        }
        Ok(())
    }

    /// The pattern byte at `i`; past the end, the NUL that ends every Lua string.
    fn p(&self, i: usize) -> u8 {
        self.pat.get(i).copied().unwrap_or(0)
    }

    fn s(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    fn reset(&mut self) {
        self.depth = MAX_DEPTH;
        self.level = 0;
    }

    fn class_end(&self, mut p: usize) -> Step<usize> {
        let c = self.p(p);
        p += 1;
        match c {
            b'%' => {
                if p >= self.pat.len() {
                    return Err(Halt::LuaError);
                }
                Ok(p + 1)
            }
            b'[' => {
                if self.p(p) == b'^' {
                    p += 1;
                }
                loop {
                    if p >= self.pat.len() {
                        return Err(Halt::LuaError);
                    }
                    let c = self.p(p);
                    p += 1;
                    if c == b'%' && p < self.pat.len() {
                        p += 1;
                    }
                    if self.p(p) == b']' {
                        return Ok(p + 1);
                    }
                }
            }
            _ => Ok(p),
        }
    }

    fn bracket_class(&self, c: u8, mut p: usize, end: usize) -> bool {
        let mut sig = true;
        if self.p(p + 1) == b'^' {
            sig = false;
            p += 1;
        }
        loop {
            p += 1;
            if p >= end {
                return !sig;
            }
            if self.p(p) == b'%' {
                p += 1;
                if class(c, self.p(p)) {
                    return sig;
                }
            } else if self.p(p + 1) == b'-' && p + 2 < end {
                p += 2;
                if self.p(p - 2) <= c && c <= self.p(p) {
                    return sig;
                }
            } else if self.p(p) == c {
                return sig;
            }
        }
    }

    fn single(&self, s: usize, p: usize, ep: usize) -> bool {
        if s >= self.src.len() {
            return false;
        }
        let c = self.src[s];
        match self.p(p) {
            b'.' => true,
            b'%' => class(c, self.p(p + 1)),
            b'[' => self.bracket_class(c, p, ep - 1),
            other => other == c,
        }
    }

    fn balance(&mut self, mut s: usize, p: usize) -> Step<Option<usize>> {
        if p + 1 >= self.pat.len() {
            return Err(Halt::LuaError);
        }
        if self.s(s) != self.p(p) {
            return Ok(None);
        }
        let (open, close) = (self.p(p), self.p(p + 1));
        let mut depth = 1;
        loop {
            s += 1;
            if s >= self.src.len() {
                return Ok(None);
            }
            self.step(1)?;
            if self.src[s] == close {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some(s + 1));
                }
            } else if self.src[s] == open {
                depth += 1;
            }
        }
    }

    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> Step<Option<usize>> {
        let mut i = 0;
        while self.single(s + i, p, ep) {
            self.step(1)?;
            i += 1;
        }
        loop {
            if let Some(end) = self.run(s + i, ep + 1)? {
                return Ok(Some(end));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> Step<Option<usize>> {
        loop {
            if let Some(end) = self.run(s, ep + 1)? {
                return Ok(Some(end));
            }
            if !self.single(s, p, ep) {
                return Ok(None);
            }
            s += 1;
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: isize) -> Step<Option<usize>> {
        if self.level >= MAX_CAPTURES {
            return Err(Halt::LuaError);
        }
        self.capture[self.level] = (s, what);
        self.level += 1;
        let res = self.run(s, p)?;
        if res.is_none() {
            self.level -= 1;
        }
        Ok(res)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        let l = (0..self.level)
            .rev()
            .find(|&l| self.capture[l].1 == CAP_UNFINISHED)
            .ok_or(Halt::LuaError)?;
        self.capture[l].1 = (s - self.capture[l].0) as isize;
        let res = self.run(s, p)?;
        if res.is_none() {
            self.capture[l].1 = CAP_UNFINISHED;
        }
        Ok(res)
    }

    fn match_capture(&mut self, s: usize, l: u8) -> Step<Option<usize>> {
        let l = usize::from(l.wrapping_sub(b'1'));
        if l >= self.level || self.capture[l].1 == CAP_UNFINISHED {
            return Err(Halt::LuaError);
        }
        let (init, len) = self.capture[l];
        // A position capture's length is negative: as a `size_t` in C it never fits.
        let Ok(len) = usize::try_from(len) else {
            return Ok(None);
        };
        self.step(1 + len as u64 / 64)?;
        let fits = self.src.len() - s >= len && self.src[init..init + len] == self.src[s..s + len];
        Ok(fits.then_some(s + len))
    }

    /// lstrlib.c `match`: where a match of the pattern from `p` on starting at `s` ends.
    fn run(&mut self, mut s: usize, mut p: usize) -> Step<Option<usize>> {
        if self.depth == 0 {
            return Err(Halt::LuaError);
        }
        self.depth -= 1;
        let end = self.pat.len();
        let res = loop {
            self.step(1)?;
            if p == end {
                break Some(s);
            }
            match (self.p(p), self.p(p + 1)) {
                (b'(', b')') => break self.start_capture(s, p + 2, CAP_POSITION)?,
                (b'(', _) => break self.start_capture(s, p + 1, CAP_UNFINISHED)?,
                (b')', _) => break self.end_capture(s, p + 1)?,
                (b'$', _) if p + 1 == end => break (s == self.src.len()).then_some(s),
                (b'%', b'b') => match self.balance(s, p + 2)? {
                    Some(next) => {
                        s = next;
                        p += 4;
                    }
                    None => break None,
                },
                (b'%', b'f') => {
                    p += 2;
                    if self.p(p) != b'[' {
                        return Err(Halt::LuaError);
                    }
                    let ep = self.class_end(p)?;
                    let previous = if s == 0 { 0 } else { self.src[s - 1] };
                    if !self.bracket_class(previous, p, ep - 1)
                        && self.bracket_class(self.s(s), p, ep - 1)
                    {
                        p = ep;
                    } else {
                        break None;
                    }
                }
                (b'%', d) if d.is_ascii_digit() => match self.match_capture(s, d)? {
                    Some(next) => {
                        s = next;
                        p += 2;
                    }
                    None => break None,
                },
                _ => {
                    let ep = self.class_end(p)?;
                    let suffix = self.p(ep);
                    if !self.single(s, p, ep) {
                        if matches!(suffix, b'*' | b'?' | b'-') {
                            p = ep + 1;
                            continue;
                        }
                        break None;
                    }
                    match suffix {
                        b'?' => match self.run(s + 1, ep + 1)? {
                            Some(end) => break Some(end),
                            None => p = ep + 1,
                        },
                        b'+' => break self.max_expand(s + 1, p, ep)?,
                        b'*' => break self.max_expand(s, p, ep)?,
                        b'-' => break self.min_expand(s, p, ep)?,
                        _ => {
                            s += 1;
                            p = ep;
                        }
                    }
                }
            }
        };
        self.depth += 1;
        Ok(res)
    }
}

/// lstrlib.c `match_class`, in the C locale.
fn class(c: u8, cl: u8) -> bool {
    let res = match cl.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'g' => c.is_ascii_graphic(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        b's' => matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        b'z' => c == 0,
        _ => return cl == c,
    };
    if cl.is_ascii_lowercase() { res } else { !res }
}

/// lstrlib.c `posrelatI` minus one: the 0-based start of a search from Lua's `init`.
fn start(init: i64, len: usize) -> usize {
    let len_i = i64::try_from(len).unwrap_or(i64::MAX);
    let pos = if init > 0 {
        init
    } else if init == 0 || init < -len_i {
        1
    } else {
        len_i + init + 1
    };
    usize::try_from(pos - 1).unwrap_or(usize::MAX)
}

fn matcher<'a, 'c>(
    src: &'a [u8],
    pat: &'a [u8],
    charge: &'c mut dyn FnMut(u64) -> bool,
) -> Matcher<'a, 'c> {
    Matcher {
        src,
        pat,
        depth: MAX_DEPTH,
        level: 0,
        capture: [(0, 0); MAX_CAPTURES],
        steps: 0,
        charge,
    }
}

/// Settle the steps not charged yet.
fn settle(m: &mut Matcher<'_, '_>) -> Step<()> {
    let steps = std::mem::take(&mut m.steps);
    if steps > 0 && !(m.charge)(steps) {
        return Err(Halt::Budget);
    }
    Ok(())
}

/// The work of `string.find(s, p, init, plain)` (`find`) or `string.match(s, p, init)`:
/// whether it finds a match.
pub fn find(
    s: &[u8],
    p: &[u8],
    init: i64,
    plain: bool,
    find: bool,
    charge: &mut dyn FnMut(u64) -> bool,
) -> Step<bool> {
    let init = start(init, s.len());
    if init > s.len() {
        return Ok(false);
    }
    let mut m = matcher(s, p, charge);
    if find && (plain || !p.iter().any(|b| SPECIALS.contains(b))) {
        // lmemfind: a comparison of the pattern at every place its first byte occurs.
        if p.is_empty() || p.len() > s.len() - init {
            settle(&mut m)?;
            return Ok(p.is_empty());
        }
        let mut found = false;
        for i in init..=s.len() - p.len() {
            m.step(1)?;
            if s[i] == p[0] {
                m.step(p.len() as u64 / 64)?;
                if s[i..i + p.len()] == *p {
                    found = true;
                    break;
                }
            }
        }
        settle(&mut m)?;
        return Ok(found);
    }
    let (anchor, p) = match p.first() {
        Some(b'^') => (true, &p[1..]),
        _ => (false, p),
    };
    m.pat = p;
    let mut s1 = init;
    loop {
        m.reset();
        let found = m.run(s1, 0)?.is_some();
        if found || anchor || s1 >= s.len() {
            settle(&mut m)?;
            return Ok(found);
        }
        s1 += 1;
    }
}

/// The work of iterating `string.gmatch(s, p, init)` to its end: how many matches.
pub fn gmatch(s: &[u8], p: &[u8], init: i64, charge: &mut dyn FnMut(u64) -> bool) -> Step<u64> {
    let mut m = matcher(s, p, charge);
    let mut src = start(init, s.len());
    let (mut last, mut n) = (None, 0);
    // Each call of the iterator searches on from where the last match ended.
    let mut at = src;
    while at <= s.len() {
        m.reset();
        match m.run(at, 0)? {
            Some(end) if Some(end) != last => {
                src = end;
                last = Some(end);
                n += 1;
                at = src;
            }
            _ => at += 1,
        }
    }
    settle(&mut m)?;
    Ok(n)
}

/// The matching work of `string.gsub(s, p, repl, max)` (the replacement's own work is Lua's:
/// the hook counts it): how many replacements.
pub fn gsub(
    s: &[u8],
    p: &[u8],
    max: Option<i64>,
    charge: &mut dyn FnMut(u64) -> bool,
) -> Step<i64> {
    let (anchor, p) = match p.first() {
        Some(b'^') => (true, &p[1..]),
        _ => (false, p),
    };
    let max = max.unwrap_or(s.len() as i64 + 1);
    let mut m = matcher(s, p, charge);
    let (mut src, mut last, mut n) = (0, None, 0);
    while n < max {
        m.reset();
        match m.run(src, 0)? {
            Some(end) if Some(end) != last => {
                n += 1;
                src = end;
                last = Some(end);
            }
            _ if src < s.len() => src += 1,
            _ => break,
        }
        if anchor {
            break;
        }
    }
    settle(&mut m)?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps<T>(run: impl FnOnce(&mut dyn FnMut(u64) -> bool) -> Step<T>) -> (Step<()>, u64) {
        let mut total = 0;
        let mut charge = |n: u64| {
            total += n;
            total < 1_000_000
        };
        let r = run(&mut charge).map(|_| ());
        (r, total)
    }

    #[test]
    fn catastrophic_backtracking_runs_out_of_steps_at_once() {
        let s = "a".repeat(200);
        let started = std::time::Instant::now();
        let (r, used) = steps(|c| find(s.as_bytes(), b".-.-.-b", 1, false, true, c));
        assert_eq!(r, Err(Halt::Budget));
        assert!(used >= 1_000_000);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let (r, _) = steps(|c| gsub(s.as_bytes(), b"a*a*a*a*b", None, c));
        assert_eq!(r, Err(Halt::Budget));
        let (r, _) = steps(|c| gmatch(s.as_bytes(), b"a-a-a-a-b", 1, c));
        assert_eq!(r, Err(Halt::Budget));
    }

    #[test]
    fn ordinary_patterns_cost_about_their_text() {
        let text = "error: connection refused\n".repeat(200);
        for p in [
            &b"error: (.-)\n"[..],
            b"(%w+)%s*refused",
            b"^error",
            b"%f[%w]%w+",
            b"%b()",
        ] {
            let (r, used) = steps(|c| find(text.as_bytes(), p, 1, false, true, c));
            assert_eq!(r, Ok(()));
            assert!(used < 100_000, "{} {used}", String::from_utf8_lossy(p));
            let (r, used) = steps(|c| gmatch(text.as_bytes(), p, 1, c));
            assert_eq!(r, Ok(()));
            assert!(used < 1_000_000, "{} {used}", String::from_utf8_lossy(p));
        }
        let (r, used) = steps(|c| find(text.as_bytes(), b"refused\nerror", 1, true, true, c));
        assert_eq!(r, Ok(()));
        assert!(used < 100, "{used}");
    }

    #[test]
    fn where_lua_raises_an_error_the_dry_run_stops() {
        for p in [&b"%"[..], b"[a", b"%1", b"a)", b"%f", b"%b"] {
            let (r, _) = steps(|c| find(b"abc", p, 1, false, false, c));
            assert_eq!(r, Err(Halt::LuaError), "{}", String::from_utf8_lossy(p));
        }
        let many = "()".repeat(33);
        let (r, _) = steps(|c| find(b"x", many.as_bytes(), 1, false, false, c));
        assert_eq!(r, Err(Halt::LuaError));
    }

    /// Subjects the copy is compared with Lua on.
    const SUBJECTS: [&str; 7] = [
        "",
        "hello world",
        "error: connection refused\nwarning: retry 3 of 5\n",
        "f(a(b)c) [x] {y}",
        "THE (quick) brown fox 123 jumps; over 0x1F",
        "aaa",
        "key = value\nother=1",
    ];

    /// Patterns the copy is compared with Lua on: every class, set, quantifier, anchor, capture
    /// and back-reference.
    const PATTERNS: [&str; 44] = [
        "",
        "o",
        "l+",
        "l*",
        "l-o",
        "l?o",
        "^h",
        "^$",
        "d$",
        "%a+",
        "%d+",
        "%s",
        "%S+",
        "%w+%s*=%s*%w+",
        "%x+",
        "%p",
        "%u%l*",
        "[aeiou]",
        "[^%s]+",
        "[a-f]+",
        "[%]]",
        "%b()",
        "%b[]",
        "%f[%w]%w+",
        "%f[%W]",
        "(%a+) (%a+)",
        "()o()",
        "(a)%1",
        "(a*(.)%w(%s*))",
        ".-",
        ".-b",
        "(.-)\n",
        "error: (.-)\n",
        "retry (%d+) of (%d+)",
        "x*",
        "[%a_][%w_]*",
        "a.a",
        "%.",
        "%%",
        "%z",
        "%c",
        "%g+",
        "$x",
        "^(a-)a$",
    ];

    /// `string.find` and `string.gmatch` from `init`: the copy finds what Lua finds.
    fn agree_from(lua: &mlua::Lua, subject: &str, pattern: &str, init: i64) {
        let mut charge = |_: u64| true;
        let (s, p) = (subject.as_bytes(), pattern.as_bytes());
        let theirs: bool = lua
            .load("local s, p, i = ... return (string.find(s, p, i)) ~= nil")
            .call((subject, pattern, init))
            .unwrap();
        let ours = find(s, p, init, false, true, &mut charge);
        assert_eq!(ours, Ok(theirs), "find {subject:?} {pattern:?} {init}");
        let theirs: u64 = lua
            .load("local s, p, i = ... local n = 0 for _ in string.gmatch(s, p, i) do n = n + 1 end return n")
            .call((subject, pattern, init))
            .unwrap();
        let ours = gmatch(s, p, init, &mut charge);
        assert_eq!(ours, Ok(theirs), "gmatch {subject:?} {pattern:?} {init}");
    }

    /// `string.gsub` and a plain `string.find`: the copy counts what Lua counts.
    fn agree_whole(lua: &mlua::Lua, subject: &str, pattern: &str) {
        let mut charge = |_: u64| true;
        let (s, p) = (subject.as_bytes(), pattern.as_bytes());
        let theirs: i64 = lua
            .load("local s, p = ... return select(2, string.gsub(s, p, '<%0>'))")
            .call((subject, pattern))
            .unwrap();
        assert_eq!(
            gsub(s, p, None, &mut charge),
            Ok(theirs),
            "gsub {subject:?} {pattern:?}"
        );
        let theirs: bool = lua
            .load("local s, p = ... return string.find(s, p, 1, true) ~= nil")
            .call((subject, pattern))
            .unwrap();
        let ours = find(s, p, 1, true, true, &mut charge);
        assert_eq!(ours, Ok(theirs), "plain {subject:?} {pattern:?}");
    }

    /// The copy finds what Lua finds: same matches, same counts, for every subject, pattern
    /// and start in the table (Lua's own functions are the reference).
    #[test]
    fn the_copy_agrees_with_lua() {
        let lua = mlua::Lua::new();
        for subject in SUBJECTS {
            for pattern in PATTERNS {
                for init in [1, 2, -3, 0, 100] {
                    agree_from(&lua, subject, pattern, init);
                }
                agree_whole(&lua, subject, pattern);
            }
        }
    }

    #[test]
    fn init_positions_follow_lua() {
        assert_eq!(start(1, 5), 0);
        assert_eq!(start(0, 5), 0);
        assert_eq!(start(-2, 5), 3);
        assert_eq!(start(-10, 5), 0);
        assert_eq!(start(7, 5), 6);
    }
}
