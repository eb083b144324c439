//! The AFL++ driver: `toolgate-fuzz TARGET` runs one target in AFL's
//! persistent mode; `toolgate-fuzz TARGET --seeds DIR` writes its seeds.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<&str> = toolgate_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    let Some(target) = args.first().and_then(|n| toolgate_fuzz::Target::named(n)) else {
        eprintln!("usage: toolgate-fuzz TARGET [--seeds DIR]; targets: {}", names.join(", "));
        std::process::exit(2);
    };
    if let [_, flag, dir] = args.as_slice()
        && flag == "--seeds"
    {
        std::fs::create_dir_all(dir).expect("creating the seed folder");
        for (i, seed) in toolgate_fuzz::seeds(target).into_iter().enumerate() {
            std::fs::write(std::path::Path::new(dir).join(format!("seed-{i:03}")), seed)
                .expect("writing a seed");
        }
        return;
    }
    afl::fuzz!(|data: &[u8]| toolgate_fuzz::run(target, data));
}
