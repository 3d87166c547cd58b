//! One frame of `phoenix top`: a title line, the agents table, the events, the key line.
//! Column widths add up to 80 so that 80 columns show everything.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};
use serde_json::Value;

use super::{App, Mode};
use crate::status::AgentStatus;

pub fn draw(frame: &mut Frame, app: &App) {
    let snapshot = &app.snapshot;
    let table_height = (snapshot.rows.len() as u16 + 3).min(frame.area().height / 2 + 2);
    let [title, table, events, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(table_height.max(4)),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());

    frame.render_widget(Paragraph::new(title_line(app)), title);

    let mut header = vec![
        "AGENT", "STATE", "HEALTH", "PID", "UP", "LAST", "LOOPS", "CRASH", "CONTEXT", "TODAY",
    ];
    let now = jiff::Timestamp::now();
    let mut rows: Vec<Row> = snapshot.rows.iter().map(|r| agent_row(r, now)).collect();
    let mut widths = vec![
        Constraint::Length(12),
        Constraint::Length(9),
        Constraint::Length(10),
        Constraint::Length(7),
        Constraint::Length(4),
        Constraint::Length(4),
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(9),
        Constraint::Length(6),
    ];
    if !snapshot.host_lines.is_empty() {
        // A HOST column first; AGENT and the meter give up the room it takes.
        header.insert(0, "HOST");
        widths.insert(0, Constraint::Length(HOST_WIDTH));
        widths[1] = Constraint::Length(10);
        widths[5] = Constraint::Length(4);
        widths[6] = Constraint::Length(4);
        widths[9] = Constraint::Length(9);
        rows = snapshot
            .rows
            .iter()
            .map(|r| {
                let mut cells = agent_cells(r, now);
                cells.insert(0, host_cell(snapshot.host_of(&r.agent), r));
                Row::new(cells)
            })
            .collect();
    }
    let header = Row::new(header.into_iter().map(Cell::from))
        .style(Style::new().add_modifier(Modifier::BOLD));
    let mut state = TableState::default().with_selected(Some(app.selected));
    frame.render_stateful_widget(
        Table::new(rows, widths)
            .header(header)
            .column_spacing(1)
            .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
            .block(Block::new().borders(Borders::TOP | Borders::BOTTOM)),
        table,
        &mut state,
    );

    if app.show_detail {
        draw_detail(frame, app, events);
        frame.render_widget(Paragraph::new(key_line(app, keys.width as usize)), keys);
        return;
    }
    let room = events.height.saturating_sub(1) as usize;
    let lines: Vec<Line> = snapshot
        .events
        .iter()
        .rev()
        .take(room)
        .map(event_line)
        .collect();
    let events_title = match &snapshot.problem {
        Some(p) => format!(" events · {} ", outside(p)),
        None => " critical events (newest first) ".to_string(),
    };
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::TOP).title(events_title)),
        events,
    );

    frame.render_widget(Paragraph::new(key_line(app, keys.width as usize)), keys);
}

/// The selected agent's details in place of the events: why it is in its state, its day
/// (a bar of tokens per local hour, a `×` under each hour it crashed in), its pane's last lines.
fn draw_detail(frame: &mut Frame, app: &App, area: ratatui::layout::Rect) {
    let selected = app.selected_row().map(|r| r.agent.as_str());
    let detail = app
        .detail
        .as_ref()
        .filter(|d| Some(d.agent.as_str()) == selected);
    let title = match selected {
        Some(agent) => format!(" {} · d: events ", outside(agent)),
        None => " details · d: events ".to_string(),
    };
    let mut lines: Vec<Line> = Vec::new();
    match detail {
        None => lines.push(Line::from(Span::styled(
            " reading…",
            Style::new().fg(Color::DarkGray),
        ))),
        Some(d) => {
            for (i, why) in d.why.iter().enumerate() {
                let style = if i == 0 {
                    Style::new().add_modifier(Modifier::BOLD)
                } else {
                    Style::new()
                };
                lines.push(Line::from(Span::styled(
                    format!(" {}", outside(why)),
                    style,
                )));
            }
            if let Some(day) = &d.day {
                lines.extend(day_lines(day));
            }
            if !d.pane.is_empty() {
                lines.push(Line::from(Span::styled(
                    " pane:",
                    Style::new().fg(Color::DarkGray),
                )));
                let room = (area.height as usize).saturating_sub(lines.len() + 1);
                let skip = d.pane.len().saturating_sub(room);
                lines.extend(
                    d.pane
                        .iter()
                        .skip(skip)
                        .map(|l| Line::from(format!("  {}", outside(l)))),
                );
            }
        }
    }
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::TOP).title(title)),
        area,
    );
}

/// The day as two lines of 24 columns, one per local hour from midnight: the tokens as a bar
/// of eighths, then a `×` under each hour with a crash.
fn day_lines(day: &crate::usage::report::Day) -> Vec<Line<'static>> {
    const BARS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let tokens = day.tokens_by_hour();
    let max = tokens.iter().copied().max().unwrap_or(0).max(1);
    let bar: String = tokens
        .iter()
        .map(|t| match t {
            0 => '·',
            t => BARS[((*t as f64 / max as f64) * 8.0).ceil().clamp(1.0, 8.0) as usize],
        })
        .collect();
    let total: u64 = tokens.iter().sum();
    let cost: f64 = day.hours.iter().map(|h| h.cost_usd).sum();
    let unpriced = day.hours.iter().any(|h| h.unpriced);
    let crash_hours = day.crash_hours();
    let marks: String = (0..24)
        .map(|h| if crash_hours.contains(&h) { '×' } else { ' ' })
        .collect();
    vec![
        Line::from(vec![
            Span::styled(" today   ", Style::new().fg(Color::DarkGray)),
            Span::styled(format!("|{bar}|"), Style::new().fg(Color::Blue)),
            Span::raw(format!(
                " {} tokens · {}{}",
                crate::usage::short_count(total),
                crate::usage::usd_text(cost),
                if unpriced { " + unpriced" } else { "" }
            )),
        ]),
        Line::from(vec![
            Span::styled(" crashes ", Style::new().fg(Color::DarkGray)),
            Span::styled(format!(" {marks} "), Style::new().fg(Color::Red)),
            Span::raw(format!(" {} today · 00h to 24h", day.crashes.len())),
        ]),
    ]
}

fn title_line(app: &App) -> Line<'static> {
    let rows = &app.snapshot.rows;
    let count = |h: &str| rows.iter().filter(|r| r.health == h).count();
    let waiting = rows.iter().filter(|r| r.needs_input.is_some()).count();
    let at = app
        .snapshot
        .at
        .map(|t| {
            t.to_zoned(jiff::tz::TimeZone::system())
                .strftime("%H:%M:%S")
                .to_string()
        })
        .unwrap_or_default();
    Line::from(vec![
        Span::styled(
            format!(" phoenix top · {} ", app.snapshot.fleet),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        // Before the counts: on a narrow terminal the end of the line is cut first.
        hosts_span(&app.snapshot.host_lines),
        Span::styled(
            if waiting > 0 {
                format!(
                    "· {waiting} need{} a human ",
                    if waiting == 1 { "s" } else { "" }
                )
            } else {
                String::new()
            },
            Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(
            "· {}: {} healthy, {} warning, {} down {}",
            crate::text::counted(rows.len(), "agent"),
            count("healthy"),
            count("warning"),
            count("down") + count("recovering"),
            match app.snapshot.daemon {
                Some(pid) => format!("· daemon pid {pid} "),
                None => "· no daemon ".to_string(),
            },
        )),
        Span::styled(format!("· {at}"), Style::new().fg(Color::DarkGray)),
    ])
}

/// The HOST column's width: `(local)` and most host names.
const HOST_WIDTH: u16 = 8;

/// The host's cell of a row (`(local)` for this machine's agents); grey when the host did
/// not answer last time (its row is what it said before).
fn host_cell(host: Option<&str>, r: &AgentStatus) -> Cell<'static> {
    let label: String = host
        .unwrap_or("(local)")
        .chars()
        .take(usize::from(HOST_WIDTH))
        .collect();
    let style = match (host, r.health) {
        (Some(_), "unknown") => Style::new().fg(Color::DarkGray),
        _ => Style::new(),
    };
    Cell::from(label).style(style)
}

/// `· hosts 1/2 ` (how many hosts answered last time), red when one did not; nothing
/// without hosts.
fn hosts_span(lines: &[super::hosts::HostLine]) -> Span<'static> {
    if lines.is_empty() {
        return Span::raw("");
    }
    let answering = lines
        .iter()
        .filter(|l| l.error.is_none() && !l.pending)
        .count();
    let style = match answering == lines.len() {
        true => Style::new(),
        false => Style::new().fg(Color::Red),
    };
    Span::styled(format!("· hosts {answering}/{} ", lines.len()), style)
}

fn agent_row(r: &AgentStatus, now: jiff::Timestamp) -> Row<'static> {
    Row::new(agent_cells(r, now))
}

fn agent_cells(r: &AgentStatus, now: jiff::Timestamp) -> Vec<Cell<'static>> {
    let health_color = match r.health {
        "healthy" => Color::Green,
        "warning" | "recovering" => Color::Yellow,
        "down" => Color::Red,
        _ => Color::DarkGray,
    };
    let ago = r
        .last_activity
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| short_secs(now.as_second() - t.as_second()))
        .unwrap_or_else(|| "-".into());
    let loops = if r.stale_loops > 0 {
        format!("{}!{}", r.open_loops, r.stale_loops)
    } else {
        r.open_loops.to_string()
    };
    let crashes = match r.max_crashes {
        Some(max) => format!("{}/{max}", r.crashes),
        None => r.crashes.to_string(),
    };
    // Waiting for a person says more than the health it has meanwhile.
    let health = match &r.needs_input {
        Some(_) => Cell::from("needs you")
            .style(Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD)),
        None => Cell::from(r.health).style(Style::new().fg(health_color)),
    };
    // Messages waiting for its turn to end: a mark after the name (the 80 columns have no
    // room for a column of their own).
    let name = match r.messages_pending {
        0 => Line::from(r.agent.clone()),
        n => Line::from(vec![
            Span::raw(r.agent.clone()),
            Span::styled(format!(" ✉{n}"), Style::new().fg(Color::Cyan)),
        ]),
    };
    vec![
        Cell::from(name),
        Cell::from(r.state),
        health,
        Cell::from(r.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into())),
        Cell::from(r.uptime_secs.map(short_secs).unwrap_or_else(|| "-".into())),
        Cell::from(ago),
        Cell::from(loops),
        Cell::from(crashes),
        Cell::from(meter(r)),
        Cell::from(today(r)),
    ]
}

/// Today's spend in six characters: its estimated cost when priced (`$12.34`), else its
/// tokens (`123.4k`), `-` without a ledger.
fn today(r: &AgentStatus) -> String {
    let Some(u) = &r.usage_today else {
        return "-".into();
    };
    match u.spent.cost_usd {
        Some(usd) if usd < 100.0 => format!("${usd:.2}"),
        Some(usd) => format!("${usd:.0}"),
        None if u.spent.tokens.total == 0 => "-".into(),
        None => crate::usage::short_count(u.spent.tokens.total),
    }
}

/// `▮▮▮▮▯ 72` — how fresh the agent's saved context is (`-` when nothing was saved).
fn meter(r: &AgentStatus) -> Line<'static> {
    let c = &r.context;
    if c.level == "none" || c.level == "unknown" {
        return Line::from(Span::styled(
            format!("- {}", c.level),
            Style::new().fg(Color::DarkGray),
        ));
    }
    let filled = (usize::from(c.score) + 10) / 20;
    let color = match c.level {
        "fresh" => Color::Green,
        "aging" => Color::Yellow,
        _ => Color::Red,
    };
    Line::from(vec![
        Span::styled("▮".repeat(filled), Style::new().fg(color)),
        Span::styled(
            "▯".repeat(5 - filled.min(5)),
            Style::new().fg(Color::DarkGray),
        ),
        Span::raw(format!(" {:>3}", c.score)),
    ])
}

/// Text from outside phoenix (an agent's words, its screen, a host's error) as the terminal
/// may show it: ratatui drops control characters but draws a title's bidi controls and
/// invisible characters as they are; `text::terminal_text` shows them all.
fn outside(text: &str) -> String {
    crate::text::terminal_text(text).into_owned()
}

fn event_line(e: &Value) -> Line<'static> {
    let s = |k: &str| outside(e[k].as_str().unwrap_or(""));
    let time = e["ts"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| {
            t.to_zoned(jiff::tz::TimeZone::system())
                .strftime("%H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|| "--:--:--".into());
    let reason: String = s("reason").chars().take(120).collect();
    Line::from(vec![
        Span::styled(format!("{time} "), Style::new().fg(Color::DarkGray)),
        Span::styled(
            format!("{:<10} ", s("agent")),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::styled(format!("{} ", s("event")), Style::new().fg(Color::Cyan)),
        Span::raw(reason),
    ])
}

fn key_line(app: &App, width: usize) -> Line<'static> {
    match &app.mode {
        Mode::Confirm(super::Command::Restart { agent, fresh }) => Line::from(Span::styled(
            format!(
                " Restart `{agent}`{}? y = yes, any other key = no",
                if *fresh { " with a fresh session" } else { "" }
            ),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        )),
        Mode::Confirm(super::Command::Stop { agent }) => Line::from(Span::styled(
            format!(" Stop `{agent}` (down until started)? y = yes, any other key = no"),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        )),
        Mode::Confirm(super::Command::Start { agent }) => Line::from(Span::styled(
            format!(" Start `{agent}`? y = yes, any other key = no"),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        )),
        Mode::Confirm(_) => Line::from(" y = yes, any other key = no"),
        Mode::Input { agent, text } => {
            let prompt = format!(" inject into `{agent}` (Enter sends, empty = latest handoff): ");
            // The end of a long text stays in view, where the typing happens.
            let room = width.saturating_sub(prompt.chars().count() + 2).max(10);
            let skip = text.chars().count().saturating_sub(room);
            Line::from(vec![
                Span::styled(prompt, Style::new().fg(Color::Yellow)),
                Span::raw(text.chars().skip(skip).collect::<String>()),
                Span::styled("▏", Style::new().add_modifier(Modifier::SLOW_BLINK)),
            ])
        }
        Mode::Browse => match &app.message {
            Some(m) => Line::from(format!(" {}", outside(m))),
            None if selected_wait(app).is_some() => {
                let (agent, wait) = selected_wait(app).expect("checked");
                let said = if wait.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", outside(&wait.message))
                };
                Line::from(Span::styled(
                    format!(
                        " {agent} needs a human ({}{said}) · a opens its pane",
                        outside(&wait.reason)
                    ),
                    Style::new().fg(Color::Magenta),
                ))
            }
            None => Line::from(Span::styled(
                " ↑↓ · r restart · R fresh · s stop · S start · i inject · a pane · d details · q",
                Style::new().fg(Color::DarkGray),
            )),
        },
    }
}

/// The selected agent's wait for a person, if it waits.
fn selected_wait(app: &App) -> Option<(&str, &crate::state::NeedsInput)> {
    let r = app.snapshot.rows.get(app.selected)?;
    Some((r.agent.as_str(), r.needs_input.as_ref()?))
}

pub(super) fn short_secs(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86_400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}
