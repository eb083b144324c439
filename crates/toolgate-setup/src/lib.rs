//! From the MCP setup a person already has to a toolgate config: their
//! clients' configs read as each client documents them (`clients`), a config
//! written with no credential in it, its tools classed and pinned
//! (`import`, `init`), each stdio server's box granted from its arguments
//! (`grants`), and a config checked with every problem at once
//! (`check`). The CLI (`toolgate import`, `init`, `config check`) calls these.

pub mod check;
pub mod clients;
pub mod grants;
pub mod import;
pub mod init;
mod toml_text;
