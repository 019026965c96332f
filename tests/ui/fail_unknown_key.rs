/// Does things.
#[derive(toolgate::Tool)]
#[tool(effect = "read", colour = "blue")]
struct Colourful;

fn main() {}
