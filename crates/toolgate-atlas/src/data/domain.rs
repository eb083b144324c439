//! The fixed vocabulary of the Atlas world: machine families, variants, the
//! 22 part categories of `find_part`'s contract, and the fault codes with the
//! words customers and engineers use for them.

pub const FAMILIES: [&str; 3] = ["AC-250", "AC-180", "RS-90"];
pub const VARIANTS: [&str; 3] = ["A", "B", "S"];

/// Every exact model variant, e.g. `AC-250-S`.
pub fn model_variants() -> Vec<String> {
    FAMILIES.iter().flat_map(|f| VARIANTS.iter().map(move |v| format!("{f}-{v}"))).collect()
}

/// Splits `AC-250-S` into (`AC-250`, `S`).
pub fn split_variant(model_variant: &str) -> Option<(&str, &str)> {
    let (family, variant) = model_variant.rsplit_once('-')?;
    (FAMILIES.contains(&family) && VARIANTS.contains(&variant)).then_some((family, variant))
}

/// The categories exactly as `find_part`'s `category` enum lists them, with
/// the two-letter code used in part numbers.
pub const CATEGORIES: [(&str, &str); 22] = [
    ("aftercooler-core", "AC"),
    ("aftercooler-drain", "AD"),
    ("air-hose", "AH"),
    ("bearing", "BR"),
    ("belt", "BT"),
    ("coupling-element", "CE"),
    ("fan-blade", "FB"),
    ("gasket-set", "GS"),
    ("gauge", "GA"),
    ("hour-meter", "HM"),
    ("intake-filter", "IF"),
    ("mount-kit", "MK"),
    ("oil-filter", "OF"),
    ("pressure-transducer", "PT"),
    ("relief-valve", "RV"),
    ("separator-element", "SE"),
    ("shaft-seal", "SS"),
    ("starter-contactor", "SC"),
    ("thermostatic-valve", "TV"),
    ("unloader-valve", "UV"),
    ("valve-plate", "VP"),
    ("wiring-loom", "WL"),
];

/// Categories whose part differs on the sound-attenuated `-S` machines: the
/// enclosure runs hotter and quieter, so cooling, intake and mounting parts
/// are not interchangeable with `-A`/`-B`.
pub const S_SPECIFIC: [&str; 6] = [
    "thermostatic-valve",
    "fan-blade",
    "intake-filter",
    "mount-kit",
    "gasket-set",
    "separator-element",
];

/// Categories whose part differs on `-B` machines (400 V three-phase supply).
pub const B_SPECIFIC: [&str; 3] = ["starter-contactor", "wiring-loom", "pressure-transducer"];

/// A fault code, the category of part that usually fixes it, and phrases a
/// customer might use for it. Symptom texts are assembled from these, so the
/// lexical ranking of `search_tickets` has real signal to find.
pub struct Fault {
    pub code: &'static str,
    pub category: &'static str,
    pub title: &'static str,
    pub phrases: &'static [&'static str],
    pub finding: &'static str,
}

pub const FAULTS: &[Fault] = &[
    Fault {
        code: "F-101",
        category: "thermostatic-valve",
        title: "high discharge temperature",
        phrases: &[
            "trips on high temperature after about forty minutes",
            "discharge temperature alarm on the display",
            "running very hot and shuts itself down in the afternoon",
            "overheating when the enclosure doors are closed",
            "temperature warning light then the compressor stops",
            "hot air smell and high temp shutdown",
        ],
        finding: "oil bypassing the cooler; thermostatic valve stuck part-open",
    },
    Fault {
        code: "F-102",
        category: "separator-element",
        title: "oil carry-over",
        phrases: &[
            "oil in the air line and on the tools",
            "oily mist coming out of the drops",
            "oil consumption has gone up a lot",
            "air smells of oil and the filters downstream are wet with oil",
            "topping up oil every week",
        ],
        finding: "separator element saturated, differential pressure above limit",
    },
    Fault {
        code: "F-103",
        category: "unloader-valve",
        title: "pressure not building",
        phrases: &[
            "pressure will not build past five bar",
            "runs all the time but never reaches set pressure",
            "compressor does not load",
            "air pressure low across the workshop",
            "keeps running unloaded",
        ],
        finding: "unloader valve sticking open, piston scored",
    },
    Fault {
        code: "F-104",
        category: "relief-valve",
        title: "safety valve blowing",
        phrases: &[
            "safety valve blowing off with a loud hiss",
            "relief valve lifting at normal pressure",
            "loud bang and hissing from the top of the receiver",
            "valve on the tank keeps venting",
        ],
        finding: "relief valve seat worn, lifting below set point",
    },
    Fault {
        code: "F-105",
        category: "mount-kit",
        title: "excessive vibration",
        phrases: &[
            "shaking badly and moving across the floor",
            "excessive vibration and rattling",
            "vibration through the wall into the office",
            "bolts keep working loose from the vibration",
            "rattle from the base when it loads",
        ],
        finding: "anti-vibration mounts collapsed",
    },
    Fault {
        code: "F-106",
        category: "belt",
        title: "drive belt slipping",
        phrases: &[
            "squealing noise at start up",
            "belt squeal when it loads",
            "burning rubber smell",
            "high pitched screech then it settles down",
            "black dust inside the cabinet",
        ],
        finding: "drive belt glazed and under tension",
    },
    Fault {
        code: "F-107",
        category: "starter-contactor",
        title: "motor fails to start",
        phrases: &[
            "will not start, just clicks",
            "contactor chattering on start",
            "motor hums but does not turn",
            "trips the breaker when it tries to start",
            "dead in the morning, starts after several attempts",
        ],
        finding: "starter contactor contacts pitted and burnt",
    },
    Fault {
        code: "F-108",
        category: "pressure-transducer",
        title: "erratic pressure reading",
        phrases: &[
            "pressure display jumping around",
            "reading on the screen does not match the gauge",
            "loads and unloads every few seconds",
            "pressure sensor fault message",
            "short cycling all day",
        ],
        finding: "pressure transducer drifting, signal noisy",
    },
    Fault {
        code: "F-109",
        category: "shaft-seal",
        title: "oil leak at shaft",
        phrases: &[
            "oil leaking at the front of the airend",
            "puddle of oil under the machine",
            "oil dripping near the coupling",
            "oil on the floor every morning",
        ],
        finding: "shaft seal lip worn, weeping at the airend",
    },
    Fault {
        code: "F-110",
        category: "aftercooler-drain",
        title: "water in the air",
        phrases: &[
            "water coming out of the air line",
            "water in the tools and spray guns",
            "drain not discharging any water",
            "condensate spraying from the drops",
            "wet air and rust in the pipework",
        ],
        finding: "condensate drain blocked, float stuck",
    },
    Fault {
        code: "F-111",
        category: "intake-filter",
        title: "restricted intake",
        phrases: &[
            "takes much longer to fill the tank",
            "low air flow and sounds strained",
            "intake filter warning on the display",
            "output dropped since the building work started",
            "dusty site and performance has fallen off",
        ],
        finding: "intake filter blocked, restriction indicator red",
    },
    Fault {
        code: "F-112",
        category: "bearing",
        title: "bearing noise",
        phrases: &[
            "grinding noise from the motor end",
            "rumbling noise getting louder each week",
            "metallic knocking when running",
            "noise like gravel in a tin",
        ],
        finding: "motor bearing dry and rough",
    },
    Fault {
        code: "F-113",
        category: "fan-blade",
        title: "cooling fan damage",
        phrases: &[
            "clattering from the cooling fan",
            "fan noise and it runs hotter than before",
            "broken piece of fan found in the cabinet",
            "whirring and ticking sound from the back",
        ],
        finding: "fan blade cracked at the hub",
    },
    Fault {
        code: "F-114",
        category: "wiring-loom",
        title: "intermittent electrical fault",
        phrases: &[
            "display goes blank now and then",
            "random shutdowns with no alarm",
            "controller resets itself",
            "intermittent fault after it was moved",
        ],
        finding: "wiring loom chafed behind the control panel",
    },
    Fault {
        code: "F-115",
        category: "aftercooler-core",
        title: "aftercooler leak",
        phrases: &[
            "air leaking from the cooler",
            "hissing from the radiator area",
            "outlet air very warm and wet",
            "cooler looks damaged and leaking",
        ],
        finding: "aftercooler core cracked at the header",
    },
    Fault {
        code: "F-116",
        category: "oil-filter",
        title: "oil filter bypass",
        phrases: &[
            "oil filter warning on the display",
            "oil pressure low warning",
            "service light stays on after the service",
        ],
        finding: "oil filter bypass open, element blocked",
    },
    Fault {
        code: "F-117",
        category: "gasket-set",
        title: "gasket weep",
        phrases: &[
            "oil weeping around the head",
            "misting oil from the cover joint",
            "small leak at the inlet housing",
        ],
        finding: "gasket set hardened, weeping at the joints",
    },
    Fault {
        code: "F-118",
        category: "gauge",
        title: "gauge reading wrong",
        phrases: &[
            "gauge stuck at zero",
            "needle on the gauge does not move",
            "gauge glass cracked and reads high",
        ],
        finding: "gauge movement seized",
    },
    Fault {
        code: "F-119",
        category: "air-hose",
        title: "hose failure",
        phrases: &[
            "hose burst inside the machine",
            "loud bang and air blowing out of the side",
            "air leak from a hose in the cabinet",
        ],
        finding: "internal air hose split at the crimp",
    },
];

/// Context a customer adds to a report; shared across faults, so it is noise
/// the ranking has to see through.
pub const CONTEXTS: &[&str] = &[
    "since the last service",
    "on the night shift",
    "only on hot days",
    "the site is very dusty",
    "after the power cut on monday",
    "it has been getting worse for two weeks",
    "operator says it started suddenly",
    "happens most days",
    "",
    "",
];

pub const CUSTOMERS: &[&str] = &[
    "Harbour Foods Ltd",
    "Kestrel Print Works",
    "Meridian Joinery",
    "Northgate Dairy Co-op",
    "Brightwater Bottling",
    "Calder Valley Motors",
    "Oakfield Plastics",
    "Ridgeway Fabrication",
    "St. Brigid's Hospital Estates",
    "Thornbury Bakery",
    "Westmoor Quarry Services",
    "Ashdown Dental Labs",
];

pub const FIRST_NAMES: &[&str] = &[
    "Alex", "Priya", "Tom", "Grace", "Samir", "Joanna", "Luca", "Mei", "Owen", "Fatima", "Ruth",
    "Declan",
];
pub const LAST_NAMES: &[&str] = &[
    "Hughes",
    "Patel",
    "Okafor",
    "Lindqvist",
    "Brennan",
    "Kowalski",
    "Ahmed",
    "Fraser",
    "Moreau",
    "Chen",
];
pub const ENGINEERS: &[&str] =
    &["D. Marsh", "K. Osei", "R. Tanaka", "J. Whitfield", "M. Doyle", "S. Varga"];
