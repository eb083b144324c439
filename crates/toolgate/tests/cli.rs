//! Level 4: the agent scenario end to end — `toolgate demo` starts the Atlas
//! servers, reads contracts live and plays the case; its sandbox shows what
//! the ungoverned writes did. Also the binary's basic contract.

use std::process::Command;

fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

#[test]
fn version_and_help() {
    let v = toolgate().arg("--version").output().unwrap();
    assert!(v.status.success());
    assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), format!("toolgate {}", env!("CARGO_PKG_VERSION")));
    let h = toolgate().arg("--help").output().unwrap();
    assert!(h.status.success());
    assert!(String::from_utf8_lossy(&h.stdout).contains("demo"));
    let bad = toolgate().arg("no-such-command").output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-command"));
}

#[test]
fn the_demo_reads_contracts_live_and_shows_what_ungoverned_writes_did() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolgate().arg("demo").arg("--state").arg(dir.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));

    // The authority table, from live annotations.
    let class_of = |tool: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(tool))
            .and_then(|l| l.split_whitespace().last())
            .unwrap_or_else(|| panic!("{tool} missing from the table:\n{stdout}"))
            .to_string()
    };
    assert_eq!(class_of("post_ticket_update"), "requires_approval");
    assert_eq!(class_of("raise_parts_order"), "prohibited");
    assert_eq!(class_of("export_service_records"), "prohibited");
    for read in ["get_ticket", "search_tickets", "check_availability", "find_part", "search_manual"] {
        assert_eq!(class_of(read), "automatic", "{read}");
    }
    // The diagnosis found the overheating history of the -S machine.
    assert!(stdout.contains("F-101"), "{stdout}");

    // Each ungoverned write left exactly one record in the sandbox.
    let lines = |file: &str| std::fs::read_to_string(dir.path().join(file)).map(|s| s.lines().count()).unwrap_or(0);
    assert_eq!(lines("notes.jsonl"), 1);
    assert_eq!(lines("orders.jsonl"), 1);
    assert_eq!(lines("outbox.jsonl"), 1);
    let outbox = std::fs::read_to_string(dir.path().join("outbox.jsonl")).unwrap();
    assert!(outbox.contains("site_contact"), "the export carried the private data");
}
