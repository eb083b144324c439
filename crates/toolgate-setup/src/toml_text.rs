//! The text `import` writes into a config: a TOML basic string
//! (`quoted`), and the text of a comment (`one_line`). Both the server
//! sections (`import`) and their boxes (`grants`) are written with these.

/// A text for a TOML comment: no control character (CR, LF, …) may end it early or break the file.
pub(crate) fn one_line(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// A TOML basic string (the one writer every registry entry uses).
pub(crate) use toolgate_core::audit::toml_string as quoted;
