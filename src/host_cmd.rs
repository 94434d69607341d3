//! `exitlab host`: what matters for exit cost on this host.

pub fn host_cmd(json: bool) -> i32 {
    let info = exitlab_vmm::host::probe();
    if json {
        match serde_json::to_string_pretty(&info) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("exitlab: cannot encode the host description: {e}");
                return 1;
            }
        }
    } else {
        print!("{}", info.render_text());
    }
    0
}
