//! Continuity numbers. Run with `cargo bench --bench continuity`.
//!
//! 1. Indexing throughput: 100,000 handoffs into the FTS5 index (handoffs/s);
//!    `PHOENIX_BENCH_HANDOFFS=1000000` for issue 34's million.
//! 2. Search latency over them: p50 / p99 / max of 1,000 queries through `Store::search`
//!    (goal p99 ≤ 10 ms; the seed asks < 100 ms), and of `phoenix handoff search` end to end.
//! 3. Tap throughput: MB/s of pane output through the `->continuity:` parser.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use phoenix::continuity::handoff::{Handoff, Trigger};
use phoenix::continuity::tap::Tap;
use phoenix::state::FleetDir;
use phoenix::store::Store;

const DEFAULT_HANDOFFS: usize = 100_000;
const QUERIES: usize = 1_000;

/// A vocabulary of made-up words, drawn log-uniformly (a few words everywhere, most words
/// rare) as in real text; a 44-word corpus would make every query match a fifth of it.
const VOCABULARY: usize = 20_000;
const SYLLABLES: &[&str] = &[
    "ba", "ko", "ri", "tem", "lo", "sa", "ver", "mi", "da", "nu", "pe", "ska", "tor", "ge", "li",
    "mon", "ra", "vi", "che", "do",
];

fn make_word(mut i: usize) -> String {
    let mut w = String::new();
    loop {
        w.push_str(SYLLABLES[i % SYLLABLES.len()]);
        i /= SYLLABLES.len();
        if i == 0 {
            break;
        }
    }
    w
}

/// A small deterministic generator, so runs compare.
struct Rng {
    state: u64,
    words: Vec<String>,
}

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng {
            state: seed,
            words: (0..VOCABULARY).map(make_word).collect(),
        }
    }
    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }
    fn word(&mut self) -> String {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        let i = ((VOCABULARY as f64).powf(u) as usize).saturating_sub(1);
        self.words[i.min(VOCABULARY - 1)].clone()
    }
    /// A word people search for: not one of the 50 most common (the stop-word band).
    fn content_word(&mut self) -> String {
        loop {
            let u = (self.next() % 1_000_000) as f64 / 1_000_000.0;
            let i = ((VOCABULARY as f64).powf(u) as usize).saturating_sub(1);
            if i >= 50 {
                return self.words[i.min(VOCABULARY - 1)].clone();
            }
        }
    }
    fn sentence(&mut self, n: usize) -> String {
        (0..n).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }
}

fn pct(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    times[((times.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = FleetDir::new(dir.path().join(".phoenix"));
    fleet.ensure().unwrap();
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let total: usize = std::env::var("PHOENIX_BENCH_HANDOFFS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_HANDOFFS);
    let mut handoff = |i: usize| Handoff {
        id: format!("20261123T{i:09}Z-bench"),
        agent: format!("agent-{}", i % 20),
        cli: "claude".into(),
        created_at: "2026-11-23T00:00:00Z".into(),
        trigger: Trigger::AutoRestart,
        related: Vec::new(),
        summary: rng.sentence(4),
        body: format!(
            "# Handoff\n\n## Completed\n- {}\n- {}\n## Next steps\n- {}\n## Key decisions\n- {}\n",
            rng.sentence(8),
            rng.sentence(8),
            rng.sentence(10),
            rng.sentence(12)
        ),
        notes: Vec::new(),
    };

    let store = Store::open(&fleet).unwrap();
    let mut took = Duration::ZERO;
    // Made and indexed 10,000 at a time: a million handoffs are never all in memory.
    for start in (0..total).step_by(10_000) {
        let chunk: Vec<Handoff> = (start..total.min(start + 10_000))
            .map(&mut handoff)
            .collect();
        let started = Instant::now();
        store.put_handoffs(&chunk).unwrap();
        took += started.elapsed();
    }
    println!(
        "indexing: {total} handoffs in {took:.2?} ({:.0} handoffs/s)",
        total as f64 / took.as_secs_f64()
    );

    // Queries as people type them: one or two content words, now and then a prefix.
    let queries: Vec<String> = (0..QUERIES)
        .map(|i| match i % 3 {
            0 => rng.content_word(),
            1 => format!("{} {}", rng.content_word(), rng.content_word()),
            _ => {
                let w = rng.content_word();
                format!("{} {}*", rng.content_word(), &w[..w.len().min(5)])
            }
        })
        .collect();
    let mut times = Vec::with_capacity(QUERIES);
    let mut hits = 0;
    let mut slowest: Vec<(Duration, &str)> = Vec::new();
    for q in &queries {
        let t = Instant::now();
        hits += store.search(q, None, None, 10).unwrap().len();
        times.push(t.elapsed());
        slowest.push((t.elapsed(), q));
    }
    slowest.sort_by_key(|s| std::cmp::Reverse(s.0));
    println!(
        "search over {total} handoffs, {QUERIES} queries (top 10): p50 {:.2?}  p99 {:.2?}  max {:.2?}  ({} hits; goal p99 ≤ 10 ms)",
        pct(&mut times, 0.5),
        pct(&mut times, 0.99),
        pct(&mut times, 1.0),
        hits
    );
    let slow: Vec<String> = slowest
        .iter()
        .take(5)
        .map(|(t, q)| format!("`{q}` {t:.1?}"))
        .collect();
    println!("  slowest: {}", slow.join(", "));
    let mut times = Vec::new();
    for q in queries.iter().take(200) {
        let t = Instant::now();
        store.search(q, Some("agent-7"), None, 10).unwrap();
        times.push(t.elapsed());
    }
    println!(
        "search for one agent (1/20 of them): p50 {:.2?}  p99 {:.2?}",
        pct(&mut times, 0.5),
        pct(&mut times, 0.99)
    );
    // The worst case: the most common word, in nearly every handoff.
    let common = make_word(0);
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        store.search(&common, None, None, 10).unwrap();
        times.push(t.elapsed());
    }
    println!(
        "search for the most common word (`{common}`): p50 {:.2?}  max {:.2?}",
        pct(&mut times, 0.5),
        pct(&mut times, 1.0)
    );
    drop(store);

    // What a session start adds: open the index read-only and find the earlier decisions
    // that share any word with a task of a dozen words.
    let mut times = Vec::new();
    for i in 0..200 {
        let task = rng.sentence(12);
        let t = Instant::now();
        let store = Store::open_for_read(&fleet).unwrap();
        store
            .related(&format!("agent-{}", i % 20), &task, &[], 3)
            .unwrap();
        times.push(t.elapsed());
    }
    println!(
        "session start's related decisions (open + any of 4 task words, one agent): p50 {:.2?}  p99 {:.2?}",
        pct(&mut times, 0.5),
        pct(&mut times, 0.99)
    );

    // End to end through the CLI (process start, index open and catch-up included).
    let config = dir.path().join("phoenix.toml");
    std::fs::write(
        &config,
        "[fleet]\nname = \"bench\"\n[[agent]]\nname = \"agent-7\"\ncommand = \"x\"\n",
    )
    .unwrap();
    let exe = env!("CARGO_BIN_EXE_phoenix");
    // Issue 34's figure: a rare word (from the vocabulary's tail: a few handoffs hold it),
    // `phoenix handoff search` beside the same FTS5 query (ranked, top 10, with snippets) in
    // the sqlite3 CLI on the same index, interleaved so both see the same load.
    let rare: Vec<String> = (0..100)
        .map(|i| make_word(VOCABULARY - 1 - i * 37))
        .collect();
    let index = fleet.root.join(phoenix::store::INDEX);
    let sqlite3 = Path::new("/usr/bin/sqlite3");
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for word in &rare {
        let t = Instant::now();
        let out = Command::new(exe)
            .arg("--config")
            .arg(&config)
            .args(["handoff", "search", word, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success());
        ours.push(t.elapsed());
        if sqlite3.exists() {
            let sql = format!(
                "SELECT d.kind, d.agent, d.ref, d.ts, d.title, snippet(docs_fts, 1, '[', ']', '…', 16) \
                 FROM docs_fts JOIN docs d ON d.id = docs_fts.rowid \
                 WHERE docs_fts MATCH '\"{word}\"' ORDER BY rank LIMIT 10"
            );
            let t = Instant::now();
            let out = Command::new(sqlite3)
                .arg("-readonly")
                .arg(&index)
                .arg(&sql)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            floor.push(t.elapsed());
        }
    }
    print!(
        "`phoenix handoff search RARE` over {total}: p50 {:.2?}  p99 {:.2?}",
        pct(&mut ours, 0.5),
        pct(&mut ours, 0.99)
    );
    if floor.is_empty() {
        println!("  (no /usr/bin/sqlite3 for the floor: `apt-get install sqlite3`)");
    } else {
        let (p99, floor99) = (pct(&mut ours, 0.99), pct(&mut floor, 0.99));
        println!(
            "  | the same query in the sqlite3 CLI: p50 {:.2?}  p99 {floor99:.2?} (goal p99 ≤ sqlite3's: {})",
            pct(&mut floor, 0.5),
            if p99 <= floor99 { "met" } else { "NOT met" }
        );
    }

    // PHOENIX_BENCH_KEEP=1 leaves the fleet (its index) behind, to profile a search by hand.
    if std::env::var("PHOENIX_BENCH_KEEP").as_deref() == Ok("1") {
        println!("the bench's fleet stays in {}", dir.keep().display());
        return;
    }

    // The tap: realistic pane output (ANSI colours, long lines, a command now and then).
    let mut output = Vec::new();
    let mut n = 0;
    while output.len() < 64 << 20 {
        n += 1;
        output.extend_from_slice(
            format!(
                "\x1b[32m⏺\x1b[0m working on {} — step {n}: {}\r\n",
                rng.sentence(3),
                rng.sentence(20)
            )
            .as_bytes(),
        );
        if n % 1000 == 0 {
            output.extend_from_slice(b"->continuity:save <<<\r\nCurrent task: x\r\n>>>\r\n");
        }
    }
    let mut tap = Tap::new();
    let started = Instant::now();
    let mut commands = 0;
    for chunk in output.chunks(4096) {
        commands += tap.feed(chunk).len();
    }
    let took = started.elapsed();
    println!(
        "tap: {:.0} MB of pane output in {took:.2?} ({:.0} MB/s, {commands} commands found)",
        output.len() as f64 / 1e6,
        output.len() as f64 / 1e6 / took.as_secs_f64()
    );
}
