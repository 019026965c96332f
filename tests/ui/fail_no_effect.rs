/// Has no effect declared.
#[derive(toolgate::Tool)]
#[tool(name = "vague")]
struct Vague;

fn main() {}
