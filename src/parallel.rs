//! Work over many items on a few threads: an apply's steps, an observation's agents, a
//! status's rows. Each is I/O of its own (files, a process); the order of the results is the
//! order of the items.

/// `f` of every item, on up to `workers` threads side by side; the results in item order.
pub fn parallel_map<T: Send, R: Send>(
    items: Vec<T>,
    workers: usize,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let n = items.len();
    if n < 2 || workers < 2 {
        return items.into_iter().map(f).collect();
    }
    let queue = std::sync::Mutex::new(items.into_iter().enumerate());
    let mut results: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let done = std::sync::Mutex::new(Vec::with_capacity(n));
    std::thread::scope(|s| {
        for _ in 0..workers.min(n) {
            s.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((i, item)) = next else { break };
                    let r = f(item);
                    done.lock().unwrap_or_else(|e| e.into_inner()).push((i, r));
                }
            });
        }
    });
    for (i, r) in done.into_inner().unwrap_or_else(|e| e.into_inner()) {
        results[i] = Some(r);
    }
    results
        .into_iter()
        .map(|r| r.expect("every item was mapped"))
        .collect()
}

/// As many threads as the machine runs side by side (at least one).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Below this many quick pieces of work (a few file reads each) per thread, starting a
/// thread costs more than it saves.
const ITEMS_PER_THREAD: usize = 64;

/// Threads for `items` quick pieces of work: one below `ITEMS_PER_THREAD` items, else up to
/// the machine's cores.
pub fn workers_for(items: usize) -> usize {
    cores().min(items / ITEMS_PER_THREAD).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_order_of_the_items() {
        let items: Vec<u32> = (0..100).collect();
        let seen = std::sync::Mutex::new(std::collections::HashSet::new());
        let out = parallel_map(items, 4, |i| {
            seen.lock().unwrap().insert(std::thread::current().id());
            i * 2
        });
        assert_eq!(out, (0..100).map(|i| i * 2).collect::<Vec<_>>());
        assert!(seen.lock().unwrap().len() <= 4);
        assert_eq!(parallel_map(Vec::<u32>::new(), 4, |i| i), Vec::<u32>::new());
    }
}
