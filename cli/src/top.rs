//! `xtcq top`: a full-screen live view of the queues (ratatui over crossterm), refreshed
//! every `--interval`: per-queue rates, depths, the oldest job's age, busy and sleeping
//! consumers.
//!
//! - The terminal is put back (raw mode off, main screen) on every way out: `q`, Esc,
//!   Ctrl-C (a key in raw mode, not a signal), an error, a panic (the guard's `Drop`).
//! - Not on a terminal it refuses at once and points at `stats --watch`.
//! - At most [`MAX_COLS`] x [`MAX_ROWS`] cells are drawn, whatever size the terminal claims:
//!   the memory a frame takes is bounded.
//! - Rates come from the totals' deltas between two answers (as `stats --watch`).
//! - The second line shows the payload blocks held per size, when the segment has any.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::{DefaultTerminal, Frame, TerminalOptions, Viewport};
use xtcq_proto::msg::{QueueMetrics, Stats};
use xtcq_proto::queue_name::escaped;

use crate::cmd::connect;
use crate::exit;
use crate::parse_interval;
use crate::stats::{age, size_label, Rates};

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Time between refreshes (e.g. 500ms, 2s).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    interval: Duration,
}

/// Puts the terminal back when dropped.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Runs `xtcq top` until `q`, Esc or Ctrl-C.
pub fn top(socket: Option<&Path>, args: TopArgs) -> Result<i32> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        bail!("xtcq top needs a terminal; for a pipe or a log use `xtcq stats --watch`");
    }
    let client = connect(socket)?;
    let mut area = drawn_area()?;
    let mut terminal = ratatui::try_init_with_options(TerminalOptions { viewport: Viewport::Fixed(area) })?;
    let _restore = Restore;
    crossterm::execute!(std::io::stdout(), crossterm::terminal::EnterAlternateScreen)?;
    let mut before: HashMap<String, QueueMetrics> = HashMap::new();
    let mut last = Instant::now();
    loop {
        let s = client.stats(None)?;
        let secs = last.elapsed().as_secs_f64();
        last = Instant::now();
        let rows = rows(&s, &before, secs);
        before = s.queues.iter().map(|q| (q.info.name.clone(), q.metrics.clone())).collect();
        let now = drawn_area()?;
        if now != area {
            terminal.resize(now)?;
            area = now;
        }
        draw(&mut terminal, &s, &rows)?;
        if quit_within(args.interval)? {
            return Ok(exit::OK);
        }
    }
}

/// The most columns and rows drawn: ratatui keeps two buffers of the drawn area (tens of
/// bytes a cell), and a terminal may claim 10000 x 10000 (tmux allows it), which cost
/// gigabytes and seconds a frame. Past these the screen stays blank; the table fits well
/// within.
const MAX_COLS: u16 = 512;
const MAX_ROWS: u16 = 1024;

/// The terminal's area, capped at [`MAX_COLS`] x [`MAX_ROWS`].
fn drawn_area() -> Result<Rect> {
    let (cols, rows) = crossterm::terminal::size()?;
    Ok(Rect::new(0, 0, cols.min(MAX_COLS), rows.min(MAX_ROWS)))
}

/// Whether a quit key comes within `wait`.
fn quit_within(wait: Duration) -> Result<bool> {
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || !event::poll(left)? {
            return Ok(false);
        }
        if let Event::Key(k) = event::read()? {
            let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
            if k.kind == KeyEventKind::Press
                && (ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc))
            {
                return Ok(true);
            }
        }
    }
}

/// The table's cells, one row per queue.
fn rows(s: &Stats, before: &HashMap<String, QueueMetrics>, secs: f64) -> Vec<[String; 10]> {
    s.queues
        .iter()
        .map(|q| {
            let m = &q.metrics;
            let r = before.get(&q.info.name).map(|b| Rates::between(b, m, secs)).unwrap_or_default();
            let owners = q.deques.iter().filter(|d| d.owner_slot.is_some()).count();
            let name = escaped(&q.info.name);
            [
                if q.info.paused { format!("{name} (paused)") } else { name.to_string() },
                format!("{:.1}", r.pushed),
                format!("{:.1}", r.acked),
                format!("{:.1}", r.failed),
                m.queued.to_string(),
                m.running.to_string(),
                m.dead.to_string(),
                age(m.oldest_queued_ns),
                m.sleepers.to_string(),
                owners.to_string(),
            ]
        })
        .collect()
}

const HEADER: [&str; 10] =
    ["QUEUE", "PUSH/s", "ACK/s", "FAIL/s", "QUEUED", "RUNNING", "DEAD", "OLDEST", "ASLEEP", "PRODUCERS"];

fn draw(terminal: &mut DefaultTerminal, s: &Stats, rows: &[[String; 10]]) -> Result<()> {
    terminal.draw(|f| frame(f, s, rows))?;
    Ok(())
}

/// `payload blocks in use: 4KiB 3/8, 64KiB 3/3 FULL`, or nothing when there are no blocks.
fn blocks_line(s: &Stats) -> String {
    let classes: Vec<String> = s
        .payload_blocks
        .iter()
        .map(|b| {
            let full = if b.free == 0 { " FULL" } else { "" };
            format!("{} {}/{}{full}", size_label(b.size), b.in_use, b.total)
        })
        .collect();
    if classes.is_empty() {
        return String::new();
    }
    format!("payload blocks in use: {}", classes.join(", "))
}

fn frame(f: &mut Frame, s: &Stats, rows: &[[String; 10]]) {
    let [top, body] = Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(f.area());
    let r = &s.records;
    let title = format!(
        "xtcq top - xtcqd pid {}, {} process(es), records {} free of {} - q quits",
        s.daemon_pid,
        s.processes.len(),
        r.free,
        s.segment.job_records
    );
    f.render_widget(Paragraph::new(format!("{title}\n{}", blocks_line(s))), top);
    let widths =
        [Constraint::Min(12), Constraint::Length(10), Constraint::Length(10), Constraint::Length(10)]
            .into_iter()
            .chain([Constraint::Length(9); 6]);
    let header = Row::new(HEADER).style(Style::new().add_modifier(Modifier::BOLD));
    let table = Table::new(rows.iter().map(|c| Row::new(c.clone())), widths)
        .header(header)
        .block(Block::bordered().title("queues"));
    f.render_widget(table, body);
}
