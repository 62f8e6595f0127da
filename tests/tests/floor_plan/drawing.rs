//! The floor plan as ARCHITECTURE.md draws it: a table of rooms (top-level modules), each on a numbered floor, with
//! the rooms it stands on. The drawing is checked against the plan read from the code, so that it cannot drift:
//! rows went stale before (five of them named fewer rooms than their module imported, and the lifecycle stood on
//! the dialect a floor above it).

use std::collections::{BTreeMap, BTreeSet};

/// The header of the drawn table; the column "what it stands on" starts where its title does.
const HEADER: &str = "floor  what stands there";
const STANDS_ON: &str = "what it stands on";
/// Where a row's room is named: after the floor's number.
const ROOM_COLUMN: usize = 7;

/// One room of the drawing.
#[derive(Debug, PartialEq)]
pub(crate) struct Room {
    pub(crate) floor: u32,
    /// The rooms it stands on, as the drawing names them (its notes in parentheses left out).
    pub(crate) stands_on: BTreeSet<String>,
}

/// The drawing's rooms by name (`cancel/` and `message.rs` drawn, `cancel` and `message` named), read from the
/// first table of `text` whose header is [`HEADER`]. `modules` are the names a row's last column may use; "the
/// four layers" stands for the four layers' modules.
pub(crate) fn read(text: &str, modules: &BTreeSet<String>) -> BTreeMap<String, Room> {
    let mut lines = text.lines().skip_while(|line| !line.starts_with(HEADER));
    let header = lines
        .next()
        .expect("ARCHITECTURE.md has no floor plan table");
    let column = header
        .find(STANDS_ON)
        .expect("the floor plan's header has no 'what it stands on'");
    let mut rows: Vec<(String, u32, String)> = Vec::new();
    let mut floor = None;
    for line in lines.take_while(|line| !line.starts_with("```")) {
        let named = line
            .get(ROOM_COLUMN..)
            .filter(|rest| !rest.starts_with(' '))
            .and_then(|rest| rest.split_whitespace().next());
        let stands_on = line.get(column..).unwrap_or("");
        match named {
            Some(room) => {
                let number = line[..ROOM_COLUMN].trim();
                if !number.is_empty() {
                    floor = Some(number.parse().unwrap_or_else(|_| panic!("a floor: {line}")));
                }
                let floor = floor.unwrap_or_else(|| panic!("a room before any floor: {line}"));
                let name = room.trim_end_matches('/').trim_end_matches(".rs");
                rows.push((name.to_owned(), floor, stands_on.to_owned()));
            }
            None => {
                let (_, _, column) = rows
                    .last_mut()
                    .unwrap_or_else(|| panic!("a line before any room: {line}"));
                column.push(' ');
                column.push_str(stands_on);
            }
        }
    }
    rows.into_iter()
        .map(|(name, floor, column)| {
            let stands_on = names_in(&column, modules);
            (name, Room { floor, stands_on })
        })
        .collect()
}

/// The module names in a row's last column, without its notes in parentheses ("registry (DuplicateId)").
fn names_in(column: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut outside = String::new();
    let mut depth = 0usize;
    for c in column.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => outside.push(c),
            _ => {}
        }
    }
    let outside = outside.replace("the four layers", "cancel, timeout, cascade, error_map");
    outside
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|word| modules.contains(*word))
        .map(str::to_owned)
        .collect()
}

/// What differs between the drawing and the code's `arrows` (from -> to), a line each; empty when they agree.
pub(crate) fn differences(
    drawn: &BTreeMap<String, Room>,
    modules: &BTreeSet<String>,
    arrows: &BTreeSet<(String, String)>,
) -> String {
    let mut out = String::new();
    for module in modules {
        if !drawn.contains_key(module) {
            out.push_str(&format!("{module}: a module the drawing has no row for\n"));
        }
    }
    for (room, row) in drawn {
        if !modules.contains(room) {
            out.push_str(&format!("{room}: drawn, but there is no such module\n"));
            continue;
        }
        let imports: BTreeSet<String> = arrows
            .iter()
            .filter(|(from, _)| from == room)
            .map(|(_, to)| to.clone())
            .collect();
        let missing: Vec<&str> = imports
            .difference(&row.stands_on)
            .map(String::as_str)
            .collect();
        let extra: Vec<&str> = row
            .stands_on
            .difference(&imports)
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            out.push_str(&format!(
                "{room}: imports {} but the drawing does not say so\n",
                missing.join(", ")
            ));
        }
        if !extra.is_empty() {
            out.push_str(&format!(
                "{room}: drawn standing on {}, which it does not import\n",
                extra.join(", ")
            ));
        }
        for to in &imports {
            if let Some(below) = drawn.get(to).filter(|below| below.floor >= row.floor) {
                out.push_str(&format!(
                    "{room} (floor {}) stands on {to} (floor {}): not a floor below it\n",
                    row.floor, below.floor
                ));
            }
        }
    }
    out
}
