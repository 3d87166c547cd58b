//! An `allow` list of a sandbox profile: what phoenix's proxy lets a sandboxed CLI reach.
//! `validate` parses it with the same rules the proxy applies, so that a list it accepts is
//! one the proxy can serve.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The hosts a sandbox reaches, parsed from the profile's `allow` list. Each entry is a host
/// name (`api.anthropic.com`), `*.domain` (any subdomain, not the domain itself), or an IP
/// address (`127.0.0.1`, `::1`, `[::1]`), each optionally with `:port`; without a port only
/// 80 and 443. Names compare case-insensitively, a trailing dot ignored. An IP address is
/// reached only when listed as one (never because a listed name resolves to it), and a
/// `*.domain` entry never reaches a loopback, link-local or unspecified address (whoever
/// runs that domain's DNS could point it at this machine's own services): name such a host
/// exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allow {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    host: Pattern,
    /// `None`: 80 and 443.
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Name(String),
    /// `*.example.com`: the domain, without the `*.`.
    Subdomains(String),
    Ip(IpAddr),
    /// Any host name (`network = "host"`), as a `*.domain` is: never this machine's own
    /// loopback, link-local or unspecified addresses, never an IP address given as one.
    AnyName,
}

/// The ports an entry without one allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// A request's host, checked and normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl Allow {
    /// Every host name on ports 80 and 443 (`network = "host"`): what a `*.domain` allows,
    /// for every domain.
    pub fn any_name() -> Allow {
        Allow {
            entries: vec![Entry {
                host: Pattern::AnyName,
                port: None,
            }],
        }
    }

    /// Parse the `allow` list; an error names every bad entry and what an entry looks like.
    pub fn parse(list: &[String]) -> Result<Allow, String> {
        let mut entries = Vec::new();
        let mut bad = Vec::new();
        for raw in list {
            match parse_entry(raw) {
                Ok(entry) => entries.push(entry),
                Err(why) => bad.push(format!("`{}`: {why}", shown(raw))),
            }
        }
        if !bad.is_empty() {
            return Err(format!(
                "bad `allow` {}: {} (an entry is a host name, `*.domain` or an IP address, \
                 optionally with `:port`; without a port, 80 and 443)",
                if bad.len() == 1 { "entry" } else { "entries" },
                bad.join("; ")
            ));
        }
        Ok(Allow { entries })
    }

    /// Whether a request for `host` (a name, an IP address, `[v6]`) on `port` is let through.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        request_host(host).is_some_and(|h| self.admit(&h, port).is_some())
    }

    /// The entry kind that lets `host:port` through: `Some(true)` if only a `*.domain` does.
    pub(crate) fn admit(&self, host: &Host, port: u16) -> Option<bool> {
        let mut by_wildcard = None;
        for entry in &self.entries {
            let port_ok = match entry.port {
                Some(p) => p == port,
                None => DEFAULT_PORTS.contains(&port),
            };
            if !port_ok {
                continue;
            }
            match (&entry.host, host) {
                (Pattern::Name(e), Host::Name(n)) if e == n => return Some(false),
                (Pattern::Ip(e), Host::Ip(ip)) if canonical(*e) == canonical(*ip) => {
                    return Some(false);
                }
                (Pattern::AnyName, Host::Name(_)) => by_wildcard = Some(true),
                (Pattern::Subdomains(d), Host::Name(n))
                    if n.len() > d.len() + 1
                        && n.ends_with(d.as_str())
                        && n.as_bytes()[n.len() - d.len() - 1] == b'.' =>
                {
                    by_wildcard = Some(true);
                }
                _ => {}
            }
        }
        by_wildcard
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

fn parse_entry(raw: &str) -> Result<Entry, String> {
    if raw.is_empty() {
        return Err("empty".into());
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("holds a space or a control character".into());
    }
    if raw.contains("://") || raw.contains('/') {
        return Err("a host, not a URL (this one is a URL): write `api.example.com` or `api.example.com:443`".into());
    }
    if raw.contains('@') {
        return Err("a host, without a user name".into());
    }
    let (host, port) = split_host_port(raw)?;
    let port = match port {
        None => None,
        Some(p) => Some(parse_port(p)?),
    };
    let lower = normalise(host);
    let pattern = if host.starts_with('[') || host.contains(':') {
        let inside = host.trim_start_matches('[').trim_end_matches(']');
        Pattern::Ip(IpAddr::V6(inside.parse::<Ipv6Addr>().map_err(|_| {
            "not an IPv6 address (write one as `[::1]:8080`)".to_string()
        })?))
    } else if let Ok(ip) = lower.parse::<Ipv4Addr>() {
        Pattern::Ip(IpAddr::V4(ip))
    } else if let Some(domain) = lower.strip_prefix("*.") {
        check_name(domain)?;
        Pattern::Subdomains(domain.to_string())
    } else if lower == "*" {
        return Err("`*` alone allows every host: that is `network = \"host\"`".into());
    } else if lower.contains('*') {
        return Err("`*` only as the whole first label: `*.example.com`".into());
    } else {
        check_name(&lower)?;
        Pattern::Name(lower)
    };
    Ok(Entry {
        host: pattern,
        port,
    })
}

/// `host[:port]`, `[v6][:port]`, or a bare IPv6 address (no port).
fn split_host_port(raw: &str) -> Result<(&str, Option<&str>), String> {
    if raw.starts_with('[') {
        let Some(close) = raw.find(']') else {
            return Err("an unclosed `[`".into());
        };
        let (host, rest) = raw.split_at(close + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err("after `]` only `:port`".into()),
            },
        };
    }
    if raw.matches(':').count() > 1 {
        return Ok((raw, None));
    }
    Ok(match raw.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (raw, None),
    })
}

pub(crate) fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(p) if p > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(format!("port `{}` is not 1-65535", shown(text))),
    }
}

/// Lowercase, one trailing dot dropped.
fn normalise(host: &str) -> String {
    let lower = host.to_ascii_lowercase();
    match lower.strip_suffix('.') {
        Some(stripped) if !stripped.is_empty() => stripped.to_string(),
        _ => lower,
    }
}

/// A DNS host name: labels of letters, digits, `-` and `_` (not at a label's ends for `-`),
/// at most 63 bytes each and 253 in all; the last label not all digits (`127.1` is an IPv4
/// address to the resolver, not a name).
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err("not a host name (1-253 characters)".into());
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!(
                "not a host name (label `{}`: letters, digits and `-`, 1-63 characters)",
                shown(label)
            ));
        }
    }
    if name
        .rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("neither a host name nor an IP address (an IPv4 address is a.b.c.d)".into());
    }
    Ok(())
}

/// A request's host as a [`Host`], or `None` when it is neither a host name nor an IP address.
pub(crate) fn request_host(raw: &str) -> Option<Host> {
    if let Some(inside) = raw.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inside
            .parse::<Ipv6Addr>()
            .ok()
            .map(|ip| Host::Ip(ip.into()));
    }
    let lower = normalise(raw);
    if let Ok(ip) = lower.parse::<Ipv4Addr>() {
        return Some(Host::Ip(ip.into()));
    }
    check_name(&lower).ok().map(|()| Host::Name(lower))
}

/// Text from the agent as it may appear in an event or an answer: at most 255 characters,
/// anything but printable ASCII escaped.
pub(crate) fn shown(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars().take(255) {
        if c.is_ascii_graphic() {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    if raw.chars().count() > 255 {
        out.push('…');
    }
    out
}
