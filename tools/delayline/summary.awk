# SPDX-License-Identifier: MIT
# A delay line's report (one line of KEY=VALUE words, delayline.c) in
# words, for the tiers' logs:  awk -v name=NAME -f summary.awk REPORT
{
	for (i = 2; i <= NF; i++) {
		split($i, kv, "=")
		v[kv[1]] = kv[2]
	}
	wire = v["in_wire"] + 0
	printf "%s: delay line %.3f ms, loss %s%%: %d packets in (%d on the wire, %.1f MB), %d out; held at most %.1f MB, %d packets (limit %.0f MB, %.1f MB taken); dropped: loss %d on the wire (%.4f%%), over the limit %d, at the device %d; late by %.0f us at most, %.0f on average; CPU %.2f s\n",
		name, v["delay_us"] / 1000, v["loss_pct"], v["in_pkts"], wire,
		v["in_bytes"] / 1e6, v["out_pkts"], v["max_held_bytes"] / 1e6,
		v["max_held_pkts"], v["limit_bytes"] / 1e6, v["mem_bytes"] / 1e6,
		v["loss_wire"],
		wire ? 100 * v["loss_wire"] / wire : 0, v["over_pkts"],
		v["dev_drops"], v["late_max_us"], v["late_mean_us"],
		v["cpu_user_s"] + v["cpu_sys_s"]
}
