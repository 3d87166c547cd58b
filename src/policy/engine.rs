//! The Lua side of the policies: one reused sandboxed state, the scripts loaded into it, and
//! the budgeted calls of their entry points. It lives on the worker thread of a
//! [`Policies`](super::Policies).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use mlua::{Lua, LuaSerdeExt, MultiValue, Table, Value};
use serde::Serialize;

use super::error::{failure, first_line};
use super::{
    BadReturn, DEFAULT_POLICY, Decided, EMBEDDED, Error, Failure, FromPolicy, Limits, sandbox,
};

/// The sandboxed Lua state, its budget and the `phoenix.log` lines of the current call.
struct State {
    lua: Lua,
    budget: Arc<sandbox::Budget>,
    logs: Arc<Mutex<Vec<String>>>,
}

/// One loaded policy file: its entry points, or why it could not be loaded.
struct Script {
    /// Resolved path (or `builtin:…`), to find it again.
    key: String,
    name: String,
    entries: Result<Table, Error>,
}

/// What a policy function returned, before it is checked.
struct Answer {
    json: serde_json::Value,
    by: String,
    instructions: u64,
    logs: Vec<String>,
}

/// The Lua side: one reused state, its scripts, and the calls into them. Lives on the
/// worker thread of a [`Policies`].
pub(super) struct Engine {
    state: Result<State, Error>,
    limits: Limits,
    sources: Arc<sandbox::Sources>,
    /// Agent policies named relative to this (the dir of phoenix.toml).
    base: PathBuf,
    scripts: RefCell<Vec<Script>>,
}

impl Engine {
    pub(super) fn new(dir: Option<&Path>, limits: Limits, base: PathBuf) -> Engine {
        let sources = Arc::new(sandbox::Sources {
            dir: dir.map(Path::to_path_buf),
            embedded: EMBEDDED.into_iter().collect::<BTreeMap<_, _>>(),
        });
        let logs = Arc::new(Mutex::new(Vec::new()));
        let state = sandbox::new_state(&limits, sources.clone(), logs.clone())
            .map(|(lua, budget)| State { lua, budget, logs })
            .map_err(|e| Error::new("(sandbox)", "load", None, Failure::State(e.to_string())));
        let engine = Engine {
            state,
            limits,
            sources,
            base,
            scripts: RefCell::new(Vec::new()),
        };
        engine.load_default();
        engine
    }

    pub(super) fn script_names(&self) -> Vec<String> {
        self.scripts
            .borrow()
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    pub(super) fn load_errors(&self) -> Vec<Error> {
        let mut errors: Vec<Error> = self
            .scripts
            .borrow()
            .iter()
            .filter_map(|s| s.entries.as_ref().err().cloned())
            .collect();
        if let Err(e) = &self.state {
            errors.insert(0, e.clone());
        }
        errors
    }

    fn load_default(&self) {
        let entries = match self.sources.file(DEFAULT_POLICY) {
            Some(source) => self.run_script(&source),
            None => Err(Error::new(
                format!("policies/{DEFAULT_POLICY}"),
                "load",
                None,
                Failure::Read("not found".into()),
            )),
        };
        let name = self
            .sources
            .file(DEFAULT_POLICY)
            .map(|s| s.name)
            .unwrap_or_else(|| format!("policies/{DEFAULT_POLICY}"));
        self.scripts.borrow_mut().insert(
            0,
            Script {
                key: format!("default:{DEFAULT_POLICY}"),
                name,
                entries,
            },
        );
    }

    pub(super) fn reload(&self) -> Vec<Error> {
        let mut errors = Vec::new();
        let keys: Vec<(String, String)> = self
            .scripts
            .borrow()
            .iter()
            .map(|s| (s.key.clone(), s.name.clone()))
            .collect();
        for (i, (key, name)) in keys.into_iter().enumerate() {
            let fresh = if i == 0 {
                match self.sources.file(DEFAULT_POLICY) {
                    Some(source) => self.run_script(&source),
                    None => continue,
                }
            } else {
                self.read_and_run(&key, &name)
            };
            let mut scripts = self.scripts.borrow_mut();
            match fresh {
                Ok(table) => scripts[i].entries = Ok(table),
                Err(e) => {
                    errors.push(e.clone());
                    if scripts[i].entries.is_err() {
                        scripts[i].entries = Err(e);
                    }
                }
            }
        }
        errors
    }

    fn resolve(&self, policy: &str) -> PathBuf {
        let path = crate::spec::expand_path(policy, &self.base);
        std::path::absolute(&path).unwrap_or(path)
    }

    fn display_name(&self, path: &Path) -> String {
        let base = std::path::absolute(&self.base).unwrap_or_else(|_| self.base.clone());
        path.strip_prefix(&base)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// The index of an agent policy, loading it the first time.
    pub(super) fn script_index(&self, policy: &str) -> usize {
        let path = self.resolve(policy);
        if let Some(dir) = &self.sources.dir {
            let default = std::path::absolute(dir.join(DEFAULT_POLICY)).unwrap_or_default();
            if path == default {
                return 0;
            }
        }
        let key = path.display().to_string();
        if let Some(i) = self.scripts.borrow().iter().position(|s| s.key == key) {
            return i;
        }
        let name = self.display_name(&path);
        let entries = self.read_and_run(&key, &name);
        let mut scripts = self.scripts.borrow_mut();
        scripts.push(Script { key, name, entries });
        scripts.len() - 1
    }

    fn read_and_run(&self, path: &str, name: &str) -> Result<Table, Error> {
        match sandbox::read_script(Path::new(path)) {
            Ok(text) => self.run_script(&sandbox::Source {
                name: name.to_string(),
                text,
            }),
            Err(e) => Err(Error::new(name, "load", None, Failure::Read(e.to_string()))),
        }
    }

    /// Run a script's top level under the budget; its entry points are the table it
    /// returns, or the globals it defines.
    fn run_script(&self, source: &sandbox::Source) -> Result<Table, Error> {
        let state = self.state.as_ref().map_err(Clone::clone)?;
        let fail = |e: &mlua::Error| self.convert(e, &source.name, "load");
        let (function, env) = sandbox::load_chunk(&state.lua, source).map_err(|e| fail(&e))?;
        state.budget.arm(&self.limits);
        let result = function.call::<Value>(());
        state.budget.disarm();
        match result {
            Ok(Value::Table(t)) => Ok(t),
            Ok(_) => Ok(env),
            Err(e) => {
                let _ = state.lua.gc_collect();
                Err(fail(&e))
            }
        }
    }

    fn convert(&self, err: &mlua::Error, script: &str, function: &str) -> Error {
        let (source, line) = failure(err, script, self.limits.memory);
        Error::new(script, function, line, source)
    }

    /// The agent's policy, then the default: the scripts asked in turn.
    fn chain(&self, policy: Option<&str>) -> Vec<usize> {
        match policy {
            Some(p) => {
                let i = self.script_index(p);
                if i == 0 { vec![0] } else { vec![i, 0] }
            }
            None => vec![0],
        }
    }

    /// Ask the chain for `function`. `Ok(None)`: no script defines it.
    fn try_call(
        &self,
        policy: Option<&str>,
        function: &str,
        args: &dyn Fn(&Lua) -> mlua::Result<MultiValue>,
    ) -> Result<Option<Answer>, Error> {
        let state = self.state.as_ref().map_err(Clone::clone)?;
        for i in self.chain(policy) {
            let (name, entries) = {
                let scripts = self.scripts.borrow();
                let s = &scripts[i];
                (s.name.clone(), s.entries.clone())
            };
            let entries = entries?;
            // Armed from here: the lookup may run an `__index`, the conversion of the answer
            // may run finalizers, and Lua never runs unbudgeted.
            state.budget.arm(&self.limits);
            if let Some(f) = self.entry_point(state, &entries, &name, function)? {
                return self.call(state, &f, name, function, args).map(Some);
            }
        }
        Ok(None)
    }

    /// `function` in a script's entry points, looked up under the armed budget. The budget is
    /// disarmed again unless a function was found (its call runs under the same budget).
    fn entry_point(
        &self,
        state: &State,
        entries: &Table,
        name: &str,
        function: &str,
    ) -> Result<Option<mlua::Function>, Error> {
        let found = entries.get::<Value>(function);
        if !matches!(found, Ok(Value::Function(_))) {
            state.budget.disarm();
        }
        match found {
            Ok(Value::Nil) => Ok(None),
            Ok(Value::Function(f)) => Ok(Some(f)),
            Ok(other) => Err(Error::new(
                name,
                function,
                None,
                Failure::NotAFunction {
                    name: function.into(),
                    kind: format!("a {}", other.type_name()),
                },
            )),
            Err(e) => Err(self.convert(&e, name, function)),
        }
    }

    /// Call an entry point under the armed budget, disarm it, and check what came back.
    fn call(
        &self,
        state: &State,
        f: &mlua::Function,
        name: String,
        function: &str,
        args: &dyn Fn(&Lua) -> mlua::Result<MultiValue>,
    ) -> Result<Answer, Error> {
        // Only needed for an error: asking Lua for it costs more than the call itself.
        let defined_at = || {
            u32::try_from(f.info().line_defined.unwrap_or(0))
                .ok()
                .filter(|l| *l > 0)
        };
        let bad_return = |bad| {
            Error::new(
                name.as_str(),
                function,
                defined_at(),
                Failure::BadReturn(bad),
            )
        };
        let unnamed = |message| BadReturn {
            field: None,
            message,
        };
        state.logs.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let result = args(&state.lua).and_then(|a| f.call::<Value>(a));
        let logs = std::mem::take(&mut *state.logs.lock().unwrap_or_else(|e| e.into_inner()));
        let value = match result {
            Ok(v) => v,
            Err(e) => {
                state.budget.disarm();
                // Finalizers run here unbudgeted are stopped at once (see `Budget`).
                let _ = state.lua.gc_collect();
                return Err(self.convert(&e, &name, function));
            }
        };
        // Checked on the Lua side: JSON has no NaN or infinity, so the conversion below
        // would quietly turn `delay = 0/0` into a missing field (no delay at all).
        if let Some(bad) = non_finite(&value, 0) {
            state.budget.disarm();
            return Err(bad_return(bad));
        }
        let json = match value {
            Value::Nil => Ok(serde_json::Value::Null),
            v => state.lua.from_value::<serde_json::Value>(v),
        };
        state.budget.disarm();
        let used = state.budget.used();
        let json = json.map_err(|e| bad_return(unnamed(first_line(&e.to_string()).to_string())))?;
        if json.is_null() {
            return Err(bad_return(unnamed("returned nothing (nil)".into())));
        }
        Ok(Answer {
            json,
            by: name,
            instructions: used,
            logs,
        })
    }

    /// Ask the policy chain. `Ok(None)`: no script defines `function`.
    pub(super) fn ask<T: FromPolicy>(
        &self,
        policy: Option<&str>,
        function: &str,
        args: &dyn Fn(&Lua) -> mlua::Result<MultiValue>,
    ) -> Result<Option<Decided<T>>, Error> {
        let Some(Answer {
            json,
            by,
            instructions,
            logs,
        }) = self.try_call(policy, function, args)?
        else {
            return Ok(None);
        };
        match T::from_policy(&json) {
            Ok(value) => Ok(Some(Decided {
                value,
                by,
                error: None,
                logs,
                instructions,
            })),
            Err(bad) => {
                let line = self.defined_line(policy, function);
                Err(Error::new(by, function, line, Failure::BadReturn(bad)))
            }
        }
    }

    /// Where the entry point that answered is defined (for bad returns).
    fn defined_line(&self, policy: Option<&str>, function: &str) -> Option<u32> {
        let chain = self.chain(policy);
        let scripts = self.scripts.borrow();
        chain.into_iter().find_map(|i| {
            let table = scripts[i].entries.as_ref().ok()?;
            // Raw: no `__index` runs outside a call's budget.
            match table.raw_get::<Value>(function).ok()? {
                Value::Function(f) => u32::try_from(f.info().line_defined?).ok(),
                _ => None,
            }
        })
    }

    /// The load errors of the scripts `policy` is answered by.
    pub(super) fn chain_errors(&self, policy: Option<&str>) -> Vec<Error> {
        if let Err(e) = &self.state {
            return vec![e.clone()];
        }
        // The chain may load a script: before borrowing the list.
        let chain = self.chain(policy);
        let scripts = self.scripts.borrow();
        chain
            .into_iter()
            .filter_map(|i| scripts[i].entries.as_ref().err().cloned())
            .collect()
    }
}

/// A Lua value from any serialisable input. `None` is `nil`, so `if exit.signal then` works.
pub(crate) fn to_lua<T: Serialize + ?Sized>(lua: &Lua, value: &T) -> mlua::Result<Value> {
    let options = mlua::serde::SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false);
    lua.to_value_with(value, options)
}

pub(crate) fn args2<A: Serialize, B: Serialize + ?Sized>(
    lua: &Lua,
    a: &A,
    b: &B,
) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_iter([to_lua(lua, a)?, to_lua(lua, b)?]))
}

/// The first NaN or infinite number in a returned value, named by its field. Tables are
/// walked with raw iteration (no metamethods, so no policy code runs) and only a few levels
/// deep: every decision field is a scalar, and a deeper table is refused by its field's type.
fn non_finite(value: &Value, depth: usize) -> Option<BadReturn> {
    const DEPTH: usize = 3;
    match value {
        Value::Number(n) if !n.is_finite() => Some(BadReturn {
            field: None,
            message: format!("`{n}` is not a finite number"),
        }),
        Value::Table(t) if depth < DEPTH => {
            t.pairs::<Value, Value>().flatten().find_map(|(k, v)| {
                let mut bad = non_finite(&v, depth + 1)?;
                let key = match &k {
                    Value::String(s) => s.to_string_lossy(),
                    other => other.to_string().unwrap_or_else(|_| "?".into()),
                };
                bad.field = Some(match bad.field {
                    Some(inner) => format!("{key}.{inner}"),
                    None => key,
                });
                Some(bad)
            })
        }
        _ => None,
    }
}
