//! Prints the CRD manifests; `make crds` writes them to `crds/openwop.dev_crds.yaml`.

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let yaml = openwop_crds::crds_yaml()?;
    std::io::stdout().write_all(yaml.as_bytes())?;
    Ok(())
}
