//! The Lua sandbox: a restricted Lua 5.4 state (string, table, math, utf8 and `os.time`,
//! `os.date`, `os.clock`), text-only `load`, `require` limited to policies/, a memory limit,
//! an instruction and time budget that also covers pattern matching in C, no `__gc`
//! finalizers, and the `phoenix` helper table.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlua::chunk::ChunkMode;
use mlua::{HookTriggers, Lua, LuaOptions, StdLib, Table, Value, VmState};

use super::Limits;

/// The hook runs every this many VM instructions: rare enough to cost nothing measurable,
/// often enough that a `while true do end` is stopped within a millisecond of its budget.
const HOOK_EVERY: u32 = 1000;

/// Log lines kept per call, and their length: `phoenix.log` in a loop must not eat memory.
const MAX_LOG_LINES: usize = 100;
const MAX_LOG_CHARS: usize = 2000;

/// Where `require` and the entry scripts come from: files in policies/ first, then the
/// defaults built into the binary.
#[derive(Debug, Clone)]
pub struct Sources {
    /// `<dir of phoenix.toml>/policies`, if there is one.
    pub dir: Option<PathBuf>,
    pub embedded: BTreeMap<&'static str, &'static str>,
}

/// One script's text and the name it is loaded under (tracebacks show this name).
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub text: String,
}

impl Sources {
    /// `module` is a `require` name: `patterns` or `lib.util` (→ `lib/util.lua`).
    pub fn module(&self, module: &str) -> Result<Source, String> {
        let valid = !module.is_empty()
            && module.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            });
        if !valid {
            return Err(format!(
                "module `{module}` is not a valid name (letters, digits, `_`, `-`, dots for subdirectories of policies/)"
            ));
        }
        let rel = format!("{}.lua", module.replace('.', "/"));
        self.file(&rel)
            .ok_or_else(|| format!("module `{module}` not found: no `policies/{rel}`"))
    }

    /// A file relative to policies/: the one on disk, else the built-in one.
    pub fn file(&self, rel: &str) -> Option<Source> {
        if let Some(dir) = &self.dir {
            let path = dir.join(rel);
            if let Ok(text) = read_script(&path) {
                return Some(Source {
                    name: format!("policies/{rel}"),
                    text,
                });
            }
        }
        self.embedded.get(rel).map(|text| Source {
            name: format!("builtin:policies/{rel}"),
            text: text.to_string(),
        })
    }
}

/// A policy script larger than this is not read.
const MAX_SCRIPT_BYTES: u64 = 1024 * 1024;

/// A policy script's text: a regular file of at most `MAX_SCRIPT_BYTES` (a FIFO named like
/// one must not hang the wrapper or the daemon).
pub fn read_script(path: &std::path::Path) -> Result<String, crate::state::bounded::ReadError> {
    use crate::state::bounded::{self, Links};
    bounded::read_string(path, MAX_SCRIPT_BYTES, Links::Follow)
}

/// Why the budget stopped a script.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Exceeded {
    #[error("instruction budget of {limit} exceeded (a loop that never ends?)")]
    Instructions { limit: u64, at: String },
    #[error("time budget of {}ms exceeded", limit.as_millis())]
    Time { limit: Duration, at: String },
    /// Lua ran while no call was being made: a `__gc` finalizer (run by the collector at any
    /// time). It is stopped at once; only a call's budget pays for Lua work.
    #[error("Lua ran outside a policy call (a `__gc` finalizer?) and was stopped")]
    Outside { at: String },
}

impl Exceeded {
    /// Where the script was when the budget ran out: `policies/x.lua:3`.
    pub fn at(&self) -> &str {
        match self {
            Exceeded::Instructions { at, .. }
            | Exceeded::Time { at, .. }
            | Exceeded::Outside { at } => at,
        }
    }
}

/// Shared between the hook and the caller: armed before each call, checked by the hook.
#[derive(Debug)]
pub struct Budget {
    armed: AtomicBool,
    /// Set once the budget ran out, until the next call: `pcall` cannot swallow that.
    exceeded: AtomicBool,
    used: AtomicU64,
    max: AtomicU64,
    started: Mutex<Instant>,
    time: Mutex<Duration>,
}

impl Budget {
    fn new() -> Budget {
        Budget {
            armed: AtomicBool::new(false),
            exceeded: AtomicBool::new(false),
            used: AtomicU64::new(0),
            max: AtomicU64::new(u64::MAX),
            started: Mutex::new(Instant::now()),
            time: Mutex::new(Duration::MAX),
        }
    }

    pub fn arm(&self, limits: &Limits) {
        self.used.store(0, Ordering::Relaxed);
        self.exceeded.store(false, Ordering::Relaxed);
        self.max.store(limits.instructions, Ordering::Relaxed);
        *self.started.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        *self.time.lock().unwrap_or_else(|e| e.into_inner()) = limits.time;
        self.armed.store(true, Ordering::Release);
    }

    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Release);
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Spend `steps` (VM instructions, or matching steps in `string.find` and friends).
    fn spend(&self, steps: u64, at: impl FnOnce() -> String) -> Result<(), Exceeded> {
        if !self.armed.load(Ordering::Acquire) {
            // Stays set until the next call: a finalizer's `pcall` cannot swallow it either.
            self.exceeded.store(true, Ordering::Relaxed);
            return Err(Exceeded::Outside { at: at() });
        }
        let max = self.max.load(Ordering::Relaxed);
        // One charge never adds more than the whole budget: the count cannot wrap around.
        let steps = steps.min(max.saturating_add(1));
        let used = self
            .used
            .fetch_add(steps, Ordering::Relaxed)
            .saturating_add(steps);
        if used > max {
            self.exceeded.store(true, Ordering::Relaxed);
            return Err(Exceeded::Instructions {
                limit: max,
                at: at(),
            });
        }
        let limit = *self.time.lock().unwrap_or_else(|e| e.into_inner());
        let started = *self.started.lock().unwrap_or_else(|e| e.into_inner());
        if started.elapsed() > limit {
            self.exceeded.store(true, Ordering::Relaxed);
            return Err(Exceeded::Time { limit, at: at() });
        }
        Ok(())
    }
}

/// A fresh sandboxed state and its budget. `logs` collects `phoenix.log` lines.
pub fn new_state(
    limits: &Limits,
    sources: Arc<Sources>,
    logs: Arc<Mutex<Vec<String>>>,
) -> mlua::Result<(Lua, Arc<Budget>)> {
    // No io, no package (so no C modules), no debug, no coroutine; os is cut down below.
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::UTF8 | StdLib::OS,
        LuaOptions::new(),
    )?;
    lua.set_memory_limit(limits.memory)?;
    let globals = lua.globals();

    let os: Table = globals.get("os")?;
    let safe_os = lua.create_table()?;
    for name in ["time", "date", "clock"] {
        safe_os.set(name, os.get::<Value>(name)?)?;
    }
    globals.set("os", safe_os)?;
    // `dofile`/`loadfile` read files; `collectgarbage` could stop the collector.
    for name in ["dofile", "loadfile", "collectgarbage", "print"] {
        globals.set(name, Value::Nil)?;
    }
    // Bytecode is how sandboxes are escaped: nothing may produce or load it.
    let string: Table = globals.get("string")?;
    string.set("dump", Value::Nil)?;
    let budget = Arc::new(Budget::new());
    let spent = budget.clone();
    let exceeded = lua.create_function(move |_, ()| Ok(spent.exceeded.load(Ordering::Relaxed)))?;
    // A loop around `pcall` would otherwise catch the budget error forever: the hook fires
    // every N instructions, and an inner loop of exactly N keeps it firing inside the pcall.
    lua.load(
        r##"
        local exceeded, raw_pcall, raw_xpcall, pack, unpack = ...
        local function rethrow(r)
          if not r[1] and exceeded() then error(r[2], 0) end
          return unpack(r, 1, r.n)
        end
        pcall = function(...) return rethrow(pack(raw_pcall(...))) end
        xpcall = function(...) return rethrow(pack(raw_xpcall(...))) end
        "##,
    )
    .set_name("=phoenix:sandbox")
    .call::<()>((
        exceeded,
        globals.get::<Value>("pcall")?,
        globals.get::<Value>("xpcall")?,
        lua.globals().get::<Table>("table")?.get::<Value>("pack")?,
        lua.globals()
            .get::<Table>("table")?
            .get::<Value>("unpack")?,
    ))?;
    lua.load(
        r##"
        -- Lua runs `__gc` finalizers with hooks off (lgc.c `GCTM`), so no budget could stop
        -- one that loops: a metatable with `__gc` is refused. (A `__gc` field added later does
        -- not mark the object: Lua only looks when the metatable is set.)
        local raw_setmetatable, rawget, error, type = setmetatable, rawget, error, type
        setmetatable = function(t, mt)
          if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
            error("policies may not use `__gc` finalizers: Lua runs them outside any budget", 2)
          end
          return raw_setmetatable(t, mt)
        end
        local raw_load = load
        load = function(chunk, name, _mode, ...)
          -- Keep the argument count: an explicit nil `env` means "no environment" in Lua.
          if select("#", ...) > 0 then return raw_load(chunk, name, "t", ...) end
          return raw_load(chunk, name, "t")
        end
        "##,
    )
    .set_name("=phoenix:sandbox")
    .exec()?;

    install_helpers(&lua, &globals, logs)?;
    install_require(&lua, &globals, sources)?;
    bound_patterns(&lua, &string, &budget)?;
    bound_c_loops(&lua, &budget)?;

    let hook_budget = budget.clone();
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(HOOK_EVERY),
        move |_lua, debug| {
            hook_budget
                .spend(u64::from(HOOK_EVERY), || {
                    let src = debug.source();
                    match (src.short_src, debug.current_line()) {
                        (Some(file), Some(line)) => format!("{file}:{line}:"),
                        _ => String::new(),
                    }
                })
                .map_err(mlua::Error::external)?;
            Ok(VmState::Continue)
        },
    )?;
    Ok((lua, budget))
}

/// `string.find`, `match`, `gmatch` and `gsub` each run as one call into C, where the
/// instruction hook never fires: a backtracking pattern would spin on after the call's
/// deadline. Each is wrapped: a step-counting copy of the matcher does the search first,
/// paying the call's budget, and only then does the real function run. Arguments of other
/// types go to the real function as they are (it raises the error, or converts numbers).
fn bound_patterns(lua: &Lua, string: &Table, budget: &Arc<Budget>) -> mlua::Result<()> {
    use super::pattern;
    use mlua::{Function, MultiValue};

    /// The subject, pattern and the optional integer argument at `n`, converted as Lua's
    /// `luaL_checklstring` and `luaL_optinteger` do (numbers are strings, `"3"` and `3.0`
    /// are 3); `None` when Lua would refuse them (it raises the error).
    fn args(
        lua: &Lua,
        args: &MultiValue,
        n: usize,
    ) -> Option<(mlua::LuaString, mlua::LuaString, Option<i64>)> {
        let string = |i: usize| lua.coerce_string(args.get(i)?.clone()).ok().flatten();
        let int = match args.get(n) {
            None | Some(Value::Nil) => None,
            Some(v) => Some(lua.coerce_integer(v.clone()).ok().flatten()?),
        };
        Some((string(0)?, string(1)?, int))
    }

    for name in ["find", "match", "gmatch", "gsub"] {
        let raw: Function = string.get(name)?;
        let budget = budget.clone();
        let at = format!("string.{name}");
        let wrapped = lua.create_function(move |lua, a: MultiValue| {
            let mut stopped = None;
            let mut charge = |steps: u64| match budget.spend(steps, || at.clone()) {
                Ok(()) => true,
                Err(e) => {
                    stopped = Some(e);
                    false
                }
            };
            let dry = match name {
                "find" | "match" => args(lua, &a, 2).map(|(s, p, init)| {
                    let plain = name == "find"
                        && a.get(3)
                            .is_some_and(|v| !matches!(v, Value::Nil | Value::Boolean(false)));
                    pattern::find(
                        &s.as_bytes(),
                        &p.as_bytes(),
                        init.unwrap_or(1),
                        plain,
                        name == "find",
                        &mut charge,
                    )
                    .map(|_| ())
                }),
                "gmatch" => args(lua, &a, 2).map(|(s, p, init)| {
                    pattern::gmatch(&s.as_bytes(), &p.as_bytes(), init.unwrap_or(1), &mut charge)
                        .map(|_| ())
                }),
                _ => args(lua, &a, 3).map(|(s, p, max)| {
                    pattern::gsub(&s.as_bytes(), &p.as_bytes(), max, &mut charge).map(|_| ())
                }),
            };
            if let Some(Err(pattern::Halt::Budget)) = dry
                && let Some(e) = stopped
            {
                return Err(mlua::Error::external(e));
            }
            raw.call::<MultiValue>(a)
        })?;
        string.set(name, wrapped)?;
    }
    Ok(())
}

/// The standard functions whose work in C grows with an argument (a count, a range, a
/// length), where the instruction hook never fires: `string.rep("", math.maxinteger)` or
/// `table.move({}, 1, 2^62, 1, {})` would spin on in C long after the call's deadline. Each
/// pays for that work before it runs (`charge`: steps of the call's instruction and time
/// budget, raising the budget error when they run out); `table.insert` and `table.remove`,
/// whose loops run up to a length a `__len` metamethod can make anything, are written in Lua
/// (the hook counts their loops), and a length is asked for once, then passed on explicitly.
/// Everything else in the sandbox is bounded by its arguments' real size: `string.format`
/// widths have at most two digits, `string.byte`, `utf8.codepoint` and `table.unpack` are
/// bounded by the Lua stack, `string.char`, `utf8.char` by their argument count, the rest
/// by the length of a string the memory limit bounds.
fn bound_c_loops(lua: &Lua, budget: &Arc<Budget>) -> mlua::Result<()> {
    let spent = budget.clone();
    let charge = lua.create_function(move |_, (steps, at): (f64, String)| {
        // A float: a count given as 2^62 or `math.huge` pays its whole size.
        let steps = if steps.is_nan() || steps <= 0.0 {
            0
        } else if steps >= u64::MAX as f64 {
            u64::MAX
        } else {
            steps as u64
        };
        spent.spend(steps, || at).map_err(mlua::Error::external)
    })?;
    lua.load(
        r##"
        local charge = ...
        local type, tonumber, tostring, tointeger, select, error, getmetatable, log =
          type, tonumber, tostring, math.tointeger, select, error, getmetatable, math.log
        local string, table, os = string, table, os
        -- A number as `luaL_checkinteger` takes it (`"3"` is 3); nil when it is not one (the
        -- real function raises the error).
        local function num(v)
          if type(v) == "number" then return v end
          if type(v) == "string" then return tonumber(v) end
          return nil
        end
        -- `last - first + 1` in floats: integers would wrap around for extreme ranges.
        local function span(first, last)
          first, last = num(first), num(last)
          if first and last and last >= first then return (last + 0.0) - first + 1 end
          return 0
        end

        -- Each copy of a non-empty piece is a byte of a result allocated whole first, so the
        -- memory limit bounds those; copies of nothing cost no memory and are paid for here.
        local function len(v)
          if type(v) == "string" then return #v end
          if type(v) == "number" then return #tostring(v) end
          return nil
        end
        local rep = string.rep
        string.rep = function(s, n, sep)
          local count = num(n)
          if count and count > 0 and len(s) == 0 and (sep == nil or len(sep) == 0) then
            charge(count, "string.rep")
          end
          return rep(s, n, sep)
        end

        local move = table.move
        table.move = function(a1, f, e, t, a2)
          charge(span(f, e), "table.move")
          return move(a1, f, e, t, a2)
        end

        local concat = table.concat
        table.concat = function(list, sep, i, j)
          if j == nil and type(list) == "table" then j = #list end
          charge(span(i == nil and 1 or i, j), "table.concat")
          return concat(list, sep, i, j)
        end

        local unpack = table.unpack
        table.unpack = function(list, i, j)
          if j == nil and type(list) == "table" then j = #list end
          charge(span(i == nil and 1 or i, j), "table.unpack")
          return unpack(list, i, j)
        end

        local insert = table.insert
        table.insert = function(t, ...)
          local n = select("#", ...)
          if type(t) ~= "table" or (n ~= 1 and n ~= 2) then return insert(t, ...) end
          local e = #t + 1
          if n == 1 then
            t[e] = (...)
            return
          end
          local pos, v = ...
          local p = tointeger(num(pos))
          if p == nil then return insert(t, pos, v) end
          if p < 1 or p > e then
            error("bad argument #2 to 'insert' (position out of bounds)", 2)
          end
          for i = e, p + 1, -1 do t[i] = t[i - 1] end
          t[p] = v
        end

        local remove = table.remove
        table.remove = function(t, pos)
          if type(t) ~= "table" then return remove(t, pos) end
          local size = #t
          local p = size
          if pos ~= nil then
            p = tointeger(num(pos))
            if p == nil then return remove(t, pos) end
            if p ~= size and (p < 1 or p > size + 1) then
              error("bad argument #2 to 'remove' (position out of bounds)", 2)
            end
          end
          local v = t[p]
          while p < size do
            t[p] = t[p + 1]
            p = p + 1
          end
          t[p] = nil
          return v
        end

        local sort = table.sort
        table.sort = function(t, comp)
          if type(t) ~= "table" then return sort(t, comp) end
          local n = #t
          if n > 1 then charge(n * log(n, 2), "table.sort") end
          if getmetatable(t) == nil then return sort(t, comp) end
          -- A `__len` may answer the C sort differently: sort a plain copy (the copy's
          -- loops are Lua, counted by the hook) and put it back.
          local copy = {}
          for i = 1, n do copy[i] = t[i] end
          sort(copy, comp)
          for i = 1, n do t[i] = copy[i] end
        end

        -- `string.pack("c1000000000", "")` pads a byte at a time up to the size.
        local function sizes(fmt, at)
          if type(fmt) == "string" then
            local total = 0
            for digits in fmt:gmatch("%d+") do total = total + (tonumber(digits) or 0) end
            charge(total, at)
          end
        end
        local pack, unpack_ = string.pack, string.unpack
        string.pack = function(fmt, ...)
          sizes(fmt, "string.pack")
          return pack(fmt, ...)
        end
        string.unpack = function(fmt, ...)
          sizes(fmt, "string.unpack")
          return unpack_(fmt, ...)
        end

        -- Compiling text and `os.date` run through their whole string in C.
        local load_ = load
        load = function(chunk, ...)
          if type(chunk) == "string" then charge(#chunk, "load") end
          return load_(chunk, ...)
        end
        -- `os.date` writes each conversion out through `strftime`: a `%c` is one C call
        -- and up to a few dozen bytes, so every `%` is charged as the longest answer.
        local date = os.date
        local gsub = string.gsub
        os.date = function(fmt, ...)
          if type(fmt) == "string" then
            charge(#fmt, "os.date")
            local _, conversions = gsub(fmt, "%%", "")
            charge(conversions * 64, "os.date")
          end
          return date(fmt, ...)
        end
        "##,
    )
    .set_name("=phoenix:sandbox")
    .call::<()>(charge)
}

/// The `phoenix` table: `log`, `now`, `match`, `status`, `duration`, `format_duration`.
fn install_helpers(lua: &Lua, globals: &Table, logs: Arc<Mutex<Vec<String>>>) -> mlua::Result<()> {
    let phoenix = lua.create_table()?;
    let log = move |_: &Lua, args: mlua::Variadic<Value>| {
        let text = args
            .iter()
            .map(|v| match v {
                Value::String(s) => s.to_string_lossy(),
                other => other.to_string().unwrap_or_else(|_| format!("{other:?}")),
            })
            .collect::<Vec<_>>()
            .join(" ");
        let mut logs = logs.lock().unwrap_or_else(|e| e.into_inner());
        if logs.len() < MAX_LOG_LINES {
            logs.push(text.chars().take(MAX_LOG_CHARS).collect());
        }
        Ok(())
    };
    let log = lua.create_function(log)?;
    phoenix.set("log", log.clone())?;
    // `print` goes to the same place as `phoenix.log`: stdout belongs to phoenix.
    globals.set("print", log)?;
    phoenix.set(
        "now",
        lua.create_function(|_, ()| {
            Ok(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0))
        })?,
    )?;
    phoenix.set(
        "match",
        lua.create_function(|lua, (text, patterns): (Option<String>, Value)| {
            let text = text.unwrap_or_default();
            let list: Vec<String> = match patterns {
                Value::String(s) => vec![s.to_string_lossy()],
                Value::Table(t) => t.sequence_values::<String>().collect::<mlua::Result<_>>()?,
                Value::Nil => Vec::new(),
                other => {
                    return Err(mlua::Error::runtime(format!(
                        "phoenix.match: patterns must be a string or a list of strings, got {}",
                        other.type_name()
                    )));
                }
            };
            match super::builtin::match_text(&text, list.iter().map(String::as_str)) {
                Some(found) => Ok(Value::String(lua.create_string(found)?)),
                None => Ok(Value::Nil),
            }
        })?,
    )?;
    phoenix.set(
        "status",
        lua.create_function(|_, text: Option<String>| {
            Ok(super::builtin::statuses(&text.unwrap_or_default())
                .first()
                .copied())
        })?,
    )?;
    phoenix.set(
        "statuses",
        lua.create_function(|_, text: Option<String>| {
            Ok(super::builtin::statuses(&text.unwrap_or_default()))
        })?,
    )?;
    phoenix.set(
        "duration",
        lua.create_function(|_, text: String| {
            crate::spec::duration::parse(&text)
                .map(|d| d.as_secs_f64())
                .map_err(mlua::Error::runtime)
        })?,
    )?;
    phoenix.set(
        "format_duration",
        lua.create_function(|_, secs: f64| {
            if !(secs.is_finite() && secs >= 0.0) {
                return Err(mlua::Error::runtime(format!(
                    "phoenix.format_duration: `{secs}` is not a number of seconds"
                )));
            }
            Ok(crate::spec::duration::format(Duration::from_secs_f64(
                secs.min(1e12),
            )))
        })?,
    )?;
    globals.set("phoenix", phoenix)?;
    Ok(())
}

/// `require(name)`: only modules from policies/ (or the built-in ones), each loaded once,
/// as text, in an environment of its own.
fn install_require(lua: &Lua, globals: &Table, sources: Arc<Sources>) -> mlua::Result<()> {
    let loaded = lua.create_table()?;
    let require = lua.create_function(move |lua, name: String| {
        match loaded.raw_get::<Value>(name.as_str())? {
            Value::Boolean(false) => {
                return Err(mlua::Error::runtime(format!(
                    "module `{name}` requires itself (circular `require`)"
                )));
            }
            Value::Nil => {}
            found => return Ok(found),
        }
        let source = sources.module(&name).map_err(mlua::Error::runtime)?;
        loaded.raw_set(name.as_str(), false)?;
        let result = load_chunk(lua, &source).and_then(|(f, _env)| f.call::<Value>(()));
        let value = match result {
            Ok(Value::Nil) => Value::Boolean(true),
            Ok(v) => v,
            Err(e) => {
                loaded.raw_set(name.as_str(), Value::Nil)?;
                return Err(e);
            }
        };
        loaded.raw_set(name.as_str(), value.clone())?;
        Ok(value)
    })?;
    globals.set("require", require)
}

/// Compile a script as text under its real name, in a fresh environment that reads globals
/// but keeps its own definitions (two policies can both define `on_exit`).
pub fn load_chunk(lua: &Lua, source: &Source) -> mlua::Result<(mlua::Function, Table)> {
    let env = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.set("__index", lua.globals())?;
    env.set_metatable(Some(meta))?;
    let function = lua
        .load(source.text.as_str())
        .set_name(format!("@{}", source.name))
        .set_mode(ChunkMode::Text)
        .set_environment(env.clone())
        .into_function()?;
    Ok((function, env))
}
