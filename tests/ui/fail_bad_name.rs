/// Has a name with a space.
#[derive(toolgate::Tool)]
#[tool(name = "two words", effect = "read")]
struct Spaced;

fn main() {}
