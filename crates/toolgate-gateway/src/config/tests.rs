/// A reload takes the servers, registry and policy of the file read
/// again, keeps every other table of the running config, and names
/// those that changed (never their values).
#[test]
fn a_reload_takes_what_can_change_and_names_what_waits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.toml");
    let text = "[gateway]\nlisten = \"127.0.0.1:9000\"\n[servers.a]\nurl = \
        \"http://127.0.0.1:1/mcp\"\n[callers.agent]\ntenant = \"t\"\nanonymous = true\n";
    let running = Config::parse(text, &path).unwrap();
    assert_eq!(running.version(), toolgate_core::proposal::sha256_hex(text.as_bytes()));
    let edited = text.replace("9000", "9001").replace("[servers.a]", "[servers.b]")
        + "[registry.\"b__x\"]\nclass = \"automatic\"\n";
    let (merged, waiting) = running.reloaded(Config::parse(&edited, &path).unwrap()).unwrap();
    assert_eq!(waiting, ["[gateway]"]);
    assert_eq!(merged.gateway.listen.port(), 9000, "the listener waits for a restart");
    assert_eq!(merged.servers.keys().collect::<Vec<_>>(), ["b"]);
    assert!(merged.registry.contains_key("b__x"));
    assert_eq!(merged.version(), toolgate_core::proposal::sha256_hex(edited.as_bytes()));
    // Unchanged, nothing waits.
    let (_, waiting) = running.reloaded(Config::parse(text, &path).unwrap()).unwrap();
    assert!(waiting.is_empty(), "{waiting:?}");
}
use super::*;
use toolgate_core::AuthorityClass;
use toolgate_mcp::upstream::Transport;

/// `text` read as the config file `/etc/toolgate/toolgate.toml` (the
/// sections' own tests read theirs with it too).
pub(crate) fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/toolgate/toolgate.toml"))
}

#[test]
fn a_ledger_password_never_reaches_a_message() {
    let shown =
        |url: &str| parse(&format!("[gateway]\nledger = \"{url}\"\n")).unwrap().ledger_display();
    assert_eq!(
        shown("postgres://tg:s3cret@db:5432/toolgate"),
        "postgres://tg:***@db:5432/toolgate"
    );
    assert_eq!(
        shown("postgres:///toolgate?host=/run/postgresql&password=s3cret&sslmode=disable"),
        "postgres:///toolgate?host=/run/postgresql&password=***&sslmode=disable"
    );
    assert_eq!(shown("postgres://tg@db/toolgate"), "postgres://tg@db/toolgate");
    assert!(parse("").unwrap().ledger_display().ends_with("state/ledger.sqlite3"));
}

#[test]
fn a_full_config_parses() {
    let c = parse(
        r#"
        [gateway]
        listen = "127.0.0.1:9000"
        [servers.tickets]
        command = "toolgate-atlas"
        args = ["tickets"]
        trusted = true
        [servers.parts]
        url = "http://127.0.0.1:8701/mcp"
        headers = { Authorization = "Bearer x" }
        [registry."tickets__get_ticket"]
        class = "automatic"
        labels = ["private_data"]
        "#,
    )
    .unwrap();
    assert_eq!(c.gateway.listen.port(), 9000);
    assert!(matches!(c.servers["tickets"].transport(), Transport::Stdio { .. }));
    assert!(!c.servers["parts"].trusted, "untrusted by default");
    assert_eq!(c.registry["tickets__get_ticket"].class, AuthorityClass::Automatic);
    assert_eq!(c.lock_path(), Path::new("/etc/toolgate/toolgate.lock"));
    assert_eq!(c.split_exposed("tickets__get__x"), Some(("tickets", "get__x")));
    assert_eq!(c.split_exposed("nobody__x"), None);
    let single = parse(
        "[servers.fixture]\nurl = \"http://h/mcp\"\nnamespace = \
            false\n[registry.\"test_simple_text\"]\nclass = \"automatic\"",
    )
    .unwrap();
    assert_eq!(single.exposed_name("fixture", "test_simple_text"), "test_simple_text");
    assert_eq!(single.split_exposed("test_simple_text"), Some(("fixture", "test_simple_text")));
    let kept = parse("[gateway]\nlock_file = \"/var/lib/toolgate/toolgate.lock\"").unwrap();
    assert_eq!(kept.lock_path(), Path::new("/var/lib/toolgate/toolgate.lock"));
}

#[test]
fn mistakes_are_named() {
    let err = |t: &str| parse(t).unwrap_err().to_string();
    assert!(err("[servers.a]\nargs = []").contains("needs `command`"));
    assert!(err("[servers.a]\ncommand = \"x\"\nurl = \"http://h\"").contains("not both"));
    assert!(err("[servers.a__b]\ncommand = \"x\"").contains("separator"));
    assert!(err("[servers.a_]\ncommand = \"x\"").contains("separator"));
    assert!(err("[servers.a]\nurl = \"ftp://h/mcp\"").contains("http:// or https://"));
    assert!(
        parse("[servers.a]\nurl = \"https://h/mcp\"").is_ok(),
        "https upstreams are checked against the system's roots and [tls] ca_file"
    );
    assert!(
        err("[tls]\nca_file = \"/nonexistent/ca.pem\"")
            .contains("tls.ca_file /nonexistent/ca.pem: cannot read it")
    );
    assert!(err("[tls]\ncert_file = \"cert.pem\"").contains("both `cert_file` and `key_file`"));
    assert!(
        err("[servers.a]\ncommand = \"x\"\n[registry.\"b__t\"]\nclass = \"automatic\"")
            .contains("names no configured server")
    );
    assert!(
        err("[servers.a]\ncommand = \"x\"\n[registry.\"a__t\"]\nclass = \"sometimes\"")
            .contains("sometimes")
    );
    assert!(err("[gateway]\nlisten_addr = \"x\"").contains("listen_addr"));
    assert!(err("[gateway]\nseparator = \".\"").contains("separator"));
    assert!(
        err("[servers.a]\ncommand = \"x\"\nnamespace = false\n[servers.b]\ncommand = \"y\"")
            .contains("exactly one server")
    );
}

#[test]
fn mcp_json_servers_import_untrusted_and_never_override() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp.json");
    std::fs::write(&file, r#"{"mcpServers": {"notes": {"command": "notes-mcp", "args": ["--x"]}, "web": {"type": "http", "url": "http://127.0.0.1:1/mcp"}}}"#).unwrap();
    let mut c = parse("[servers.tickets]\ncommand = \"t\"\ntrusted = true").unwrap();
    c.import_mcp_json(&file).unwrap();
    assert_eq!(c.servers.len(), 3);
    assert!(!c.servers["notes"].trusted && !c.servers["web"].trusted);
    std::fs::write(&file, r#"{"mcpServers": {"tickets": {"command": "evil"}}}"#).unwrap();
    assert!(c.import_mcp_json(&file).unwrap_err().to_string().contains("already configured"));
}

/// A table another crate reads (`[console]`) is checked by its code; a
/// re-read of the file (a reload) is refused by that check as a start is.
#[test]
fn a_section_check_refuses_a_reread_file_as_it_refused_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.toml");
    std::fs::write(&path, "[console]\nenabled = true\n").unwrap();
    let mut config = Config::load(&path).unwrap();
    let check: SectionCheck = |c| match c.console.get("enabled") {
        Some(toml::Value::Boolean(_)) | None => Ok(()),
        _ => Err(ConfigError::Invalid { path: c.path().into(), message: "[console]: no".into() }),
    };
    config.check_section(check).expect("a good [console]");
    assert!(config.reread().is_ok(), "the same file again");
    std::fs::write(&path, "[console]\nenabled = 3\n").unwrap();
    let refused = config.reread().expect_err("a bad [console] refused on a re-read");
    assert!(refused.to_string().contains("[console]: no"), "{refused}");
    assert!(Config::load(&path).is_ok(), "the gateway alone does not read [console]");
}
