"""Real environments: LIBERO (one task, vector envs local or on Ray), their spaces, frames, styles and episode outcomes,
and the robot arms. What is recorded from them (dataset, experts, collection, labels) is robot_data's; this
package never imports it."""
