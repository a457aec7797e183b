/**
 * When a cell has finished running in a kernel: a comm that could not open (tea_notebook not loaded
 * yet) is tried again after each cell, since that cell may have been `%load_ext tea_notebook`.
 * The sidebar and the agent cells share this.
 */
import type { KernelMessage } from '@jupyterlab/services';

export class CellRunWatch {
  /** True once per cell run that ended (its `execute_input`, then the kernel idle) while `waiting`. */
  ended(msg: KernelMessage.IMessage, waiting: boolean): boolean {
    if (msg.header.msg_type === 'execute_input') {
      this.executed = true;
    } else if (
      msg.header.msg_type === 'status' &&
      (msg.content as KernelMessage.IStatusMsg['content']).execution_state === 'idle' &&
      this.executed &&
      waiting
    ) {
      this.executed = false;
      return true;
    }
    return false;
  }

  private executed = false;
}
