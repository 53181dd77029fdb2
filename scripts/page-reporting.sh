# shellcheck shell=bash
# page_reporting_state is for the scripts that source this:
# shellcheck disable=SC2034
#
# Sourced by the benchmark scripts: suspends the kernel's free page
# reporting (virtio-balloon) for the duration of a benchmark and restores
# it on exit.
#
# Why: reporting hands memory the guest has freed back to the hypervisor,
# which must back it again, page by page, when the guest next uses it. A
# cold run fills the page cache with the memory the cache drop before it
# has just freed; where reporting handed that memory back in between, the
# run read at about half speed. On the project's test machine that struck
# about one cold run in three, whichever method it was, and no other
# source of noise came close (docs/PERFORMANCE.md, twelfth round).
#
#   suspend_page_reporting   sets page_reporting_state to what it did, for
#                            the sweep's record (call it in the script's
#                            own shell, not in $(...): it sets the trap
#                            that restores the setting)
#
# PAGE_REPORTING=keep leaves the setting alone.

page_reporting_param=/sys/module/page_reporting/parameters/page_reporting_order
page_reporting_saved=
page_reporting_state=

suspend_page_reporting() {
  if [ ! -e "$page_reporting_param" ]; then
    page_reporting_state="free page reporting: not in this kernel"
    return
  fi
  local order orders
  order=$(cat "$page_reporting_param")
  if [ "${PAGE_REPORTING:-}" = keep ]; then
    page_reporting_state="free page reporting: left on (page_reporting_order $order; PAGE_REPORTING=keep)"
    return
  fi
  # Reporting skips free blocks below this order; one past the largest
  # order (the columns of /proc/buddyinfo) skips them all.
  orders=$(awk 'NR == 1 { print NF - 4 }' /proc/buddyinfo)
  if [ "$order" -ge "$orders" ]; then
    page_reporting_state="free page reporting: already suspended (page_reporting_order $order)"
    return
  fi
  if ! echo "$orders" 2>/dev/null > "$page_reporting_param"; then
    page_reporting_state="free page reporting: on, could not suspend it (not root?); cold runs may slow down at random"
    return
  fi
  page_reporting_saved=$order
  trap restore_page_reporting EXIT
  page_reporting_state="free page reporting: suspended for the sweep (page_reporting_order $order -> $orders, restored after)"
}

restore_page_reporting() {
  if [ -n "$page_reporting_saved" ]; then
    echo "$page_reporting_saved" > "$page_reporting_param" || true
    page_reporting_saved=
  fi
}
